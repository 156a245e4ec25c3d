"""The gateway bench's platform side: a plugin channel that publishes what the bench says and
timestamps each turn's reply, and the senders that keep `IN_FLIGHT` messages on their way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from bus import FAILED, InboundMessage, InboundSender, OutboundMessage
from channels.base import Channel

#: Messages on their way at once, as a platform with many chats sends them.
IN_FLIGHT = 256


class BenchChannel(Channel):
    """Publishes what the bench says and timestamps every turn's reply."""

    name = "bench"
    running: BenchChannel | None = None

    def __init__(self, config: Any, context: Any) -> None:
        self.inbound: InboundSender | None = None
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self.turns = 0
        self.expected = 0
        self.all_answered = asyncio.Event()
        self.reply_times: dict[str, float] = {}
        BenchChannel.running = self

    async def start(self, inbound: InboundSender) -> None:
        self.inbound = inbound
        self.ready.set()
        await self.stopped.wait()

    async def stop(self) -> None:
        self.stopped.set()

    async def send(self, message: OutboundMessage) -> None:
        if message.delivery_id is None or message.metadata.get(FAILED):
            return  # not a turn's reply
        if message.reply_to is not None:
            self.reply_times[message.reply_to] = time.perf_counter()
        self.turns += 1
        if self.turns >= self.expected:
            self.all_answered.set()

    def expect(self, count: int) -> None:
        self.turns, self.expected = 0, count
        self.reply_times.clear()
        self.all_answered.clear()


async def send_all(channel: BenchChannel, messages: Iterable[InboundMessage]) -> None:
    """`messages` sent IN_FLIGHT at a time, as many platform connections would: each sender
    takes the next one when its last is durable. (A semaphore per message cost the harness
    a scan of its waiters at every release, counted as the gateway's time.)

    A generator is read as the senders go, so each message is made when it is sent, as a
    channel makes it when its update arrives (a list made beforehand is 50,000 objects of the
    harness's own for the collector to walk while the gateway is timed)."""
    assert channel.inbound is not None
    inbound = channel.inbound
    waiting = iter(messages)

    async def sender() -> None:
        for message in waiting:  # shared: each message is taken by one sender
            await inbound.send(message)

    async with asyncio.TaskGroup() as tasks:
        for number in range(IN_FLIGHT):
            tasks.create_task(sender(), name=f"bench-sender-{number}")
