"""Throughput of the in-process bus, and its cost against bare asyncio queues.

One round trip per message: a publisher task publishes an `InboundMessage`, an agent task
receives it and sends an `OutboundMessage`, a consumer task receives the reply. The baseline
runs the same three tasks over two bare bounded `asyncio.Queue`s with a `None` sentinel, doing
the same message work, so the ratio isolates what the bus adds: close semantics, sender
counting and the handle types. Both run in the same process, interleaved, best of a few rounds,
because these machines are noisy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from bench.report import Figure
from bus import InboundMessage, OutboundMessage, create_bus

SUITE = "bus"
MESSAGES = 100_000
ROUNDS = 3
CAPACITY = 4096  # the bus' default, as octos has it
#: The bus may cost this much against bare queues and still pass: it does more per message.
MIN_RATIO = 0.5


def _inbound_messages(count: int) -> list[InboundMessage]:
    # Built before timing: the platform side creates these, not the bus.
    return [
        InboundMessage(channel="bench", sender_id="u1", chat_id="c1", content=f"message {i}")
        for i in range(count)
    ]


def _reply_to(message: InboundMessage) -> OutboundMessage:
    return OutboundMessage(channel=message.channel, chat_id=message.chat_id, content="ok")


async def _through_bus(messages: list[InboundMessage]) -> int:
    agent, publisher = create_bus(CAPACITY)

    async def publish() -> None:
        for message in messages:
            await publisher.publish(message)
        publisher.close()

    async def answer() -> None:
        async for message in agent:
            await agent.send(_reply_to(message))
        agent.close()

    async def consume() -> int:
        return sum([1 async for _ in publisher.outbound()])

    async with asyncio.TaskGroup() as group:
        group.create_task(publish(), name="bench-publisher")
        group.create_task(answer(), name="bench-agent")
        received = group.create_task(consume(), name="bench-consumer")
    return received.result()


async def _through_bare_queues(messages: list[InboundMessage]) -> int:
    inbound: asyncio.Queue[InboundMessage | None] = asyncio.Queue(CAPACITY)
    outbound: asyncio.Queue[OutboundMessage | None] = asyncio.Queue(CAPACITY)

    async def publish() -> None:
        for message in messages:
            await inbound.put(message)
        await inbound.put(None)

    async def answer() -> None:
        while (message := await inbound.get()) is not None:
            await outbound.put(_reply_to(message))
        await outbound.put(None)

    async def consume() -> int:
        count = 0
        while await outbound.get() is not None:
            count += 1
        return count

    async with asyncio.TaskGroup() as group:
        group.create_task(publish(), name="baseline-publisher")
        group.create_task(answer(), name="baseline-agent")
        received = group.create_task(consume(), name="baseline-consumer")
    return received.result()


Variant = Callable[[list[InboundMessage]], Coroutine[Any, Any, int]]


def _seconds(variant: Variant, messages: list[InboundMessage]) -> float:
    started = time.perf_counter()
    received = asyncio.run(variant(messages))
    elapsed_s = time.perf_counter() - started
    if received != len(messages):
        raise RuntimeError(f"{variant.__name__} delivered {received} of {len(messages)}")
    return elapsed_s


def run(messages: int = MESSAGES, rounds: int = ROUNDS) -> list[Figure]:
    """Messages per second through a create_bus round trip, and the ratio to bare queues."""
    batch = _inbound_messages(messages)
    bus_s: list[float] = []
    bare_s: list[float] = []
    for _ in range(rounds):
        bus_s.append(_seconds(_through_bus, batch))
        bare_s.append(_seconds(_through_bare_queues, batch))
    bus_rate = messages / min(bus_s)
    bare_rate = messages / min(bare_s)
    ratio = bus_rate / bare_rate
    return [
        Figure(SUITE, "round trip, 1 producer / 1 consumer", round(bus_rate), "msg/s"),
        Figure(SUITE, "bare asyncio.Queue round trip (baseline)", round(bare_rate), "msg/s"),
        Figure(
            SUITE,
            "bus throughput / bare queues",
            round(ratio, 3),
            "ratio",
            target=MIN_RATIO,
            ok=ratio >= MIN_RATIO,
        ),
    ]


if __name__ == "__main__":
    for figure in run():
        print(figure)
