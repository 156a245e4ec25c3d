"""The outbound router: per-chat lanes, bounded concurrency, snapshot coalescing, drain."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from bus import OutboundEvent, OutboundMessage, StreamSnapshot, TypingStarted
from channels.outbound.router import OutboundRouter


def out(content: str, chat_id: str = "c1", **fields: object) -> OutboundMessage:
    return OutboundMessage(channel="rec", chat_id=chat_id, content=content, **fields)


def snap(content: str, stream_id: str) -> StreamSnapshot:
    return StreamSnapshot(out(content, stream_id=stream_id))


def text_of(event: OutboundEvent) -> str:
    match event:
        case (
            OutboundMessage(content=content)
            | StreamSnapshot(reply=OutboundMessage(content=content))
        ):
            return content
        case _:
            return f"<{type(event).__name__}>"


class Source:
    """Yields the given messages, then says so and waits until released."""

    def __init__(self, messages: list[OutboundEvent]) -> None:
        self.messages = messages
        self.all_taken = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self) -> AsyncIterator[OutboundEvent]:
        for message in self.messages:
            yield message
        # Reached only when the router asks for the next one: every message is in a lane.
        self.all_taken.set()
        await self.release.wait()


class Deliveries:
    def __init__(self) -> None:
        self.delivered: list[OutboundEvent] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.active = 0
        self.most_active = 0
        self.changed = asyncio.Event()

    async def __call__(self, message: OutboundEvent) -> None:
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        self.changed.set()
        try:
            gate = self.gates.get(message.chat_id)
            if gate is not None:
                await gate.wait()
            if text_of(message) == "explode":
                raise RuntimeError("a bug while delivering")
            self.delivered.append(message)
        finally:
            self.active -= 1
            self.changed.set()

    def of(self, chat_id: str) -> list[str]:
        return [text_of(m) for m in self.delivered if m.chat_id == chat_id]

    async def wait_for_count(self, count: int) -> None:
        await self.wait_until(lambda: len(self.delivered) >= count)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(5):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


async def route_held_then_released(events: list[OutboundEvent], *, count: int) -> list[str]:
    """Route `events` to chat c1 while its delivery is held, so all of them are queued in its
    lane first; then release it and return what the first `count` deliveries carried."""
    deliveries = Deliveries()
    gate = deliveries.gates["c1"] = asyncio.Event()
    source = Source(events)
    router = OutboundRouter(deliveries, lambda: 0)
    async with asyncio.TaskGroup() as group:
        group.create_task(router.run(source()), name="router-under-test")
        await asyncio.wait_for(source.all_taken.wait(), timeout=5)
        gate.set()
        await deliveries.wait_for_count(count)
        source.release.set()
    return deliveries.of("c1")


async def test_snapshots_superseded_in_a_lane_are_skipped() -> None:
    stream = [snap("x" * n, "s") for n in range(1, 30)]
    events: list[OutboundEvent] = [
        out("before"),
        *stream,
        out("x" * 30, stream_id="s"),
        out("after"),
    ]
    assert await route_held_then_released(events, count=3) == ["before", "x" * 30, "after"]


async def test_a_snapshot_of_another_stream_is_not_skipped() -> None:
    events: list[OutboundEvent] = [out("hold"), snap("a1", "a"), snap("b1", "b"), snap("a2", "a")]
    assert await route_held_then_released(events, count=3) == ["hold", "b1", "a2"]


async def test_typing_and_finals_are_never_skipped_only_older_snapshots_are() -> None:
    events: list[OutboundEvent] = [
        out("hold"),
        TypingStarted("rec", "c1"),
        snap("a1", "a"),
        out("a final", stream_id="a"),
        snap("b1", "b"),
        TypingStarted("rec", "c1"),
        out("b final", stream_id="b"),
    ]
    typing = "<TypingStarted>"
    delivered = await route_held_then_released(events, count=5)
    assert delivered == ["hold", typing, "a final", typing, "b final"]


async def test_concurrency_is_bounded_and_order_kept_per_chat() -> None:
    deliveries = Deliveries()
    gates = {f"chat{n}": asyncio.Event() for n in range(6)}
    deliveries.gates.update(gates)
    messages: list[OutboundEvent] = [
        out(f"{chat}-{i}", chat_id=chat) for i in range(5) for chat in gates
    ]
    source = Source(messages)
    router = OutboundRouter(deliveries, lambda: 0, max_active_chats=2)

    async with asyncio.TaskGroup() as group:
        group.create_task(router.run(source()), name="router-under-test")
        await deliveries.wait_until(lambda: deliveries.active == 2)
        # The other chats wait in their lanes; the router reads on.
        await asyncio.wait_for(source.all_taken.wait(), timeout=5)
        assert router.active_chats == len(gates)
        assert deliveries.active == 2
        for gate in gates.values():
            gate.set()
        await deliveries.wait_for_count(len(messages))
        source.release.set()

    assert deliveries.most_active <= 2
    for chat in gates:
        assert deliveries.of(chat) == [f"{chat}-{i}" for i in range(5)]


async def test_a_channel_that_cannot_deliver_holds_only_its_own_chats() -> None:
    # Its platform down, each delivery retried for hours: its chats fill its own places and
    # wait in their lanes; another channel's replies go out all the while.
    deliveries = Deliveries()
    for chat in ("down-1", "down-2", "down-3"):
        deliveries.gates[chat] = asyncio.Event()
    messages: list[OutboundEvent] = [
        OutboundMessage(channel="down", chat_id=chat, content=f"to {chat}")
        for chat in ("down-1", "down-2", "down-3")
    ]
    messages += [OutboundMessage(channel="up", chat_id=f"up-{n}", content="fine") for n in range(4)]
    source = Source(messages)
    router = OutboundRouter(deliveries, lambda: 0, max_active_chats=2)

    async with asyncio.TaskGroup() as group:
        group.create_task(router.run(source()), name="router-under-test")
        await deliveries.wait_for_count(4)
        assert {message.channel for message in deliveries.delivered} == {"up"}
        assert deliveries.active == 2  # down-1 and down-2; down-3 waits for one of them
        deliveries.gates["down-3"].set()
        deliveries.gates["down-1"].set()
        await deliveries.wait_until(lambda: deliveries.of("down-3") == ["to down-3"])
        deliveries.gates["down-2"].set()
        await deliveries.wait_for_count(len(messages))
        source.release.set()

    assert deliveries.of("down-1") == ["to down-1"]


async def test_an_exception_in_delivery_does_not_stop_the_lane() -> None:
    deliveries = Deliveries()
    source = Source([out("one"), out("explode"), out("three")])
    router = OutboundRouter(deliveries, lambda: 0)

    async with asyncio.TaskGroup() as group:
        group.create_task(router.run(source()), name="router-under-test")
        await deliveries.wait_for_count(2)
        source.release.set()

    assert deliveries.of("c1") == ["one", "three"]


async def test_close_intake_delivers_what_lanes_hold() -> None:
    deliveries = Deliveries()
    gate = deliveries.gates["c1"] = asyncio.Event()
    source = Source([out("one"), out("two")])
    router = OutboundRouter(deliveries, lambda: 0)

    async with asyncio.TaskGroup() as group:
        routing = group.create_task(router.run(source()), name="router-under-test")
        await asyncio.wait_for(source.all_taken.wait(), timeout=5)
        router.close_intake()
        gate.set()
        await asyncio.wait_for(routing, timeout=5)

    assert deliveries.of("c1") == ["one", "two"]
    await asyncio.wait_for(router.wait_idle(), timeout=5)


async def test_the_router_reads_on_whatever_its_lanes_hold() -> None:
    # What bounds the lanes is the bus (each channel's reply places): the router itself never
    # stops reading, so no event waiting in the bus stands in front of another channel's.
    deliveries = Deliveries()
    gate = deliveries.gates["c1"] = asyncio.Event()
    messages: list[OutboundEvent] = [out(f"m{n}") for n in range(2_000)]
    source = Source(messages)
    router = OutboundRouter(deliveries, lambda: 0)

    async with asyncio.TaskGroup() as group:
        group.create_task(router.run(source()), name="router-under-test")
        await asyncio.wait_for(source.all_taken.wait(), timeout=5)
        assert deliveries.delivered == []  # all 2,000 read while the first is held
        gate.set()
        await deliveries.wait_for_count(len(messages))
        source.release.set()

    assert deliveries.of("c1") == [f"m{n}" for n in range(2_000)]


async def test_every_event_is_finished_once_its_delivery_ends() -> None:
    # Delivered, failed or skipped as superseded: each is handed back, so its place is free.
    finished: list[str] = []
    deliveries = Deliveries()
    gate = deliveries.gates["c1"] = asyncio.Event()
    events: list[OutboundEvent] = [
        out("one"),
        snap("tw", "s"),
        out("two", stream_id="s"),
        out("explode"),
        TypingStarted("rec", "c1"),
    ]
    source = Source(events)
    router = OutboundRouter(
        deliveries, lambda: 0, finished=lambda event: finished.append(text_of(event))
    )

    async with asyncio.TaskGroup() as group:
        group.create_task(router.run(source()), name="router-under-test")
        await asyncio.wait_for(source.all_taken.wait(), timeout=5)
        assert finished == []
        gate.set()
        await deliveries.wait_for_count(3)
        source.release.set()

    assert finished == ["one", "tw", "two", "explode", "<TypingStarted>"]
    assert deliveries.of("c1") == ["one", "two", "<TypingStarted>"]


async def test_a_router_stopped_with_chats_waiting_for_their_turn_stops_cleanly() -> None:
    deliveries = Deliveries()
    deliveries.gates["c1"] = asyncio.Event()
    source = Source([out("first", "c1"), out("waits", "c2")])
    router = OutboundRouter(deliveries, lambda: 0, max_active_chats=1)
    running = asyncio.create_task(router.run(source()), name="router-under-test")
    await asyncio.wait_for(source.all_taken.wait(), timeout=5)
    assert deliveries.active == 1  # c1 delivers; c2 waits for its place

    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert deliveries.delivered == []
