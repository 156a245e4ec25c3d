"""The gateway bench's runtime: a real `ProfileRuntime` with the bench channel, the collector
set as the daemon sets it, and the load (messages made as they are sent) that the figures of
`bench.gateway` and `bench.gateway_costs` drive through it."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bench.bench_channel import BenchChannel, send_all
from bus import InboundMessage, OutboundMessage, create_bus
from config import ProfileConfig
from config.bus import BusConfig
from config.store import StoreConfig
from gateway.daemon.collector import YOUNG_THRESHOLD, keep_settled, settle_after_start_up
from gateway.daemon.profile import ProfileRuntime
from gateway.metrics import GatewayMetrics
from gateway.pairing import PairingDatabases
from gateway.services import ProcessServices, WebhookRoutes

SUITE = "gateway"
PROFILE = "bench"


def _profile(fsync: str) -> ProfileConfig:
    return ProfileConfig.model_validate(
        {
            # The cheapest agent there is: what is measured is the gateway around it.
            "agent": {"type": "echo", "pieces": 1},
            "queue_mode": "followup",
            "sessions": {"fsync": fsync, "max_backlog": 100_000, "max_backlog_per_chat": 10_000},
            "channels": [
                {"type": "plugin", "class_path": "bench.bench_channel:BenchChannel", "allow": ["*"]}
            ],
        }
    )


def bench_message(number: int, chats: int) -> InboundMessage:
    return InboundMessage(
        channel="bench",
        sender_id="bencher",
        chat_id=f"chat-{number % chats}",
        content=f"message number {number} with a few words to echo back",
        message_id=str(number),
    )


def bench_runtime(data_dir: Path, fsync: str = "batch") -> ProfileRuntime:
    shared = ProcessServices(
        data_dir,
        StoreConfig(),
        bus=BusConfig(),
        metrics=GatewayMetrics.create(CollectorRegistry()),
        webhooks=WebhookRoutes(),
        request_shutdown=lambda: None,
        pairing=PairingDatabases(),
    )
    return ProfileRuntime(PROFILE, _profile(fsync), shared)


async def with_runtime(
    data_dir: Path,
    work: Callable[[BenchChannel], Awaitable[Any]] | None,
    fsync: str = "batch",
    *,
    on_runtime: Callable[[ProfileRuntime, BenchChannel], Awaitable[Any]] | None = None,
    cpython_schedule: bool = False,
) -> Any:
    """`work` (or `on_runtime`, which is given the runtime too) on a running runtime, the
    collector set as the daemon sets it (or, for `cpython_schedule`, start-up frozen and young
    collections spaced out, but the older generations on CPython's own schedule: the collector
    before `keep_settled`)."""
    runtime = bench_runtime(data_dir, fsync)
    async with running(runtime) as channel:
        # As the daemon does once its profiles are up.
        thresholds = gc.get_threshold()
        settle_after_start_up()
        if cpython_schedule:
            gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
        collector = (
            None
            if cpython_schedule
            else asyncio.create_task(keep_settled(), name="bench-gc-settle")
        )
        try:
            if on_runtime is not None:
                return await on_runtime(runtime, channel)
            assert work is not None
            return await work(channel)
        finally:
            if collector is not None:
                collector.cancel()
                await asyncio.gather(collector, return_exceptions=True)
            gc.unfreeze()
            gc.set_threshold(*thresholds)


@asynccontextmanager
async def running(runtime: ProfileRuntime) -> AsyncIterator[BenchChannel]:
    """`runtime` running with its bench channel up; stopped (its turns finished) on the way out."""
    async with asyncio.TaskGroup() as tasks:
        profile = tasks.create_task(runtime.run(), name="bench-profile")
        await runtime.ready.wait()
        channel = BenchChannel.running
        assert channel is not None
        await channel.ready.wait()
        try:
            yield channel
        finally:
            runtime.request_stop()
            await profile


async def throughput(channel: BenchChannel, chats: int, count: int, first: int = 0) -> float:
    """Turns per second over `count` messages numbered from `first` (a number is a message's
    platform id: one sent again is a duplicate, not a turn)."""
    messages = (bench_message(number, chats) for number in range(first, first + count))
    channel.expect(count)
    started = time.perf_counter()
    await send_all(channel, messages)
    await channel.all_answered.wait()
    return count / (time.perf_counter() - started)


async def bus_baseline(count: int) -> float:
    handle, publisher = create_bus()
    sender = publisher.inbound_sender()
    # Made as they are sent, as `throughput` makes the gateway's.
    messages = (bench_message(number, 100) for number in range(count))

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
