"""The whole pipeline in one process: bench channel -> dispatcher -> session append -> echo
agent -> split -> bench channel send.

A real `ProfileRuntime` runs with a plugin channel that publishes messages and records replies,
sessions on disk with the default `fsync: batch`. Figures: messages per second with 1, 100 and
10,000 distinct chats; p50 / p99 latency added at a fixed 500 messages per second; resident
memory after 10,000 chats. The baseline, measured in the same run, is the bus alone (publish,
agent side echoes, channel side receives): the ratio says what a turn costs above moving
messages.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from prometheus_client import CollectorRegistry

from bench.report import Figure
from bus import InboundMessage, InboundSender, OutboundMessage, create_bus
from channels.base import Channel
from config import ProfileConfig
from gateway.logs import configure_logging
from gateway.metrics import GatewayMetrics
from gateway.profile import ProfileRuntime
from gateway.webhooks import WebhookRoutes

SUITE = "gateway"
RATE_PER_S = 500
RATE_SECONDS = 4


class BenchChannel(Channel):
    """Publishes what the bench says and timestamps every reply."""

    running: BenchChannel | None = None

    def __init__(self, config: Any, context: Any) -> None:
        self.inbound: InboundSender | None = None
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self.replies = 0
        self.expected = 0
        self.all_replied = asyncio.Event()
        self.reply_times: dict[str, float] = {}
        BenchChannel.running = self

    @property
    def name(self) -> str:
        return "bench"

    async def start(self, inbound: InboundSender) -> None:
        self.inbound = inbound
        self.ready.set()
        await self.stopped.wait()

    async def stop(self) -> None:
        self.stopped.set()

    async def send(self, message: OutboundMessage) -> None:
        if message.reply_to is not None:
            self.reply_times[message.reply_to] = time.perf_counter()
        self.replies += 1
        if self.replies >= self.expected:
            self.all_replied.set()

    def expect(self, count: int) -> None:
        self.replies, self.expected = 0, count
        self.reply_times.clear()
        self.all_replied.clear()


def _profile(fsync: str) -> ProfileConfig:
    return ProfileConfig.model_validate(
        {
            "agent": {"type": "echo"},
            "queue_mode": "followup",
            "sessions": {"fsync": fsync},
            "channels": [
                {"type": "plugin", "class_path": "bench.gateway:BenchChannel", "allow": ["*"]}
            ],
        }
    )


def _message(number: int, chats: int) -> InboundMessage:
    return InboundMessage(
        channel="bench",
        sender_id="bencher",
        chat_id=f"chat-{number % chats}",
        content=f"message number {number} with a few words to echo back",
        message_id=str(number),
    )


async def _with_runtime(data_dir: Path, work: Any, fsync: str = "batch") -> Any:
    runtime = ProfileRuntime(
        "bench",
        _profile(fsync),
        data_dir,
        bus_capacity=4096,
        metrics=GatewayMetrics.create(CollectorRegistry()),
        webhooks=WebhookRoutes(),
        request_shutdown=lambda: None,
    )
    async with asyncio.TaskGroup() as tasks:
        running = tasks.create_task(runtime.run(), name="bench-profile")
        await runtime.started.wait()
        channel = BenchChannel.running
        assert channel is not None
        await channel.ready.wait()
        try:
            return await work(channel)
        finally:
            runtime.request_stop()
            await running


async def _throughput(channel: BenchChannel, chats: int, count: int) -> float:
    assert channel.inbound is not None
    messages = [_message(number, chats) for number in range(count)]
    channel.expect(count)
    started = time.perf_counter()
    for message in messages:
        await channel.inbound.send(message)
    await channel.all_replied.wait()
    return count / (time.perf_counter() - started)


async def _latencies(channel: BenchChannel) -> list[float]:
    assert channel.inbound is not None
    count = RATE_PER_S * RATE_SECONDS
    channel.expect(count)
    sent: dict[str, float] = {}
    started = time.perf_counter()
    for number in range(count):
        due = started + number / RATE_PER_S
        if (delay := due - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        message = _message(number, 100)
        sent[str(number)] = time.perf_counter()
        await channel.inbound.send(message)
    await channel.all_replied.wait()
    return [channel.reply_times[key] - sent[key] for key in sent]


async def _bus_baseline(count: int) -> float:
    handle, publisher = create_bus()
    sender = publisher.inbound_sender()
    messages = [_message(number, 100) for number in range(count)]

    async def agent() -> None:
        async for message in handle:
            await handle.send(
                OutboundMessage(channel="bench", chat_id=message.chat_id, content=message.content)
            )
        handle.close()

    async def channel_side() -> None:
        async for _reply in publisher.outbound():
            pass

    started = time.perf_counter()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(agent(), name="bench-agent")
        tasks.create_task(channel_side(), name="bench-receiver")
        for message in messages:
            await sender.send(message)
        sender.close()
        publisher.close()
    return count / (time.perf_counter() - started)


async def _measure() -> list[Figure]:
    configure_logging("warning")
    figures: list[Figure] = []
    process = psutil.Process()
    with tempfile.TemporaryDirectory(prefix="octos-bench-") as tmp:
        for chats, count in ((1, 500), (100, 5000), (10_000, 10_000)):
            rss_before = process.memory_info().rss

            async def run(channel: BenchChannel, c: int = chats, n: int = count) -> float:
                return await _throughput(channel, c, n)

            rate = await _with_runtime(Path(tmp) / f"chats-{chats}", run)
            figures.append(Figure(SUITE, f"end to end, {chats} chats", round(rate), "msg/s"))
            if chats == 10_000:
                grown = (process.memory_info().rss - rss_before) / 1024 / 1024
                figures.append(
                    Figure(SUITE, "resident memory growth, 10,000 chats", round(grown, 1), "MB")
                )
        latencies = await _with_runtime(Path(tmp) / "latency", _latencies)
        # The same without waiting for the disk: what durability itself costs.
        unsynced = await _with_runtime(Path(tmp) / "latency-never", _latencies, fsync="never")
    baseline = await _bus_baseline(10_000)
    figures += _latency_figures(latencies, "fsync batch")
    figures += _latency_figures(unsynced, "fsync never")
    figures += [
        Figure(SUITE, "bus alone (baseline), 100 chats", round(baseline), "msg/s"),
        Figure(
            SUITE,
            "end to end / bus alone, 100 chats",
            round(figures[1].value / baseline, 4),
            "ratio",
        ),
    ]
    return figures


def _latency_figures(latencies: list[float], policy: str) -> list[Figure]:
    quantiles = statistics.quantiles(latencies, n=100)
    return [
        Figure(
            SUITE,
            f"added latency {name} at {RATE_PER_S} msg/s, {policy}",
            round(quantiles[index] * 1000, 2),
            "ms",
        )
        for name, index in (("p50", 49), ("p99", 98))
    ]


def run() -> list[Figure]:
    return asyncio.run(_measure())
