"""The in-process bus: channels publish inbound messages, the agent side answers outbound.

Its pipes are bounded, multi-producer, single-consumer, with Rust mpsc close semantics:
senders can be cloned; when the last one is closed, the receiver drains what is queued and then
receives `None`, so a consumer stops without any other signal. A full pipe makes senders wait
(backpressure): nothing is ever dropped.

Outbound, the agent side sends typed events (`bus.envelope`): replies, stream snapshots and
typing signals, in the order the channels should see them.

Inbound, a message goes through the publisher's log first (`InboundLog`): the log checks it,
writes it and hands back what the agent side receives (in the gateway, the message with its
place in the profile's journal). A channel's `send` returns once that write is durable, as the
delivery contract asks (`bus.envelope.InboundSender`), and the agent side takes the logged
message from the queue as soon as the write is under way. Without a log (`create_bus()`), the
message itself is what the agent side receives, once it is queued.

`create_bus` returns the two ends. Nothing above the bus may depend on it being in-process:
the same two interfaces can run over a broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, overload

from typing_extensions import TypeVar

from bus.envelope import InboundMessage, InboundSender, OutboundEvent

T = TypeVar("T")
#: What the agent side receives for each inbound message: the message, or what its log made of it.
Item = TypeVar("Item", default=InboundMessage)


class PipeClosed(RuntimeError):
    """Sent on a sender that was closed, or after the receiver went away."""


class _Closed:
    """Marker queued behind the last item when the last sender closes."""


_CLOSED = _Closed()


class _PipeState(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"pipe capacity must be at least 1, got {capacity}")
        self.queue: asyncio.Queue[T | _Closed] = asyncio.Queue(capacity)
        self.senders = 0
        self.receiver_closed = False

    def sender_gone(self) -> None:
        self.senders -= 1
        if self.senders == 0 and not self.queue.full():
            # Wakes a receiver that waits on an empty queue. When the queue is full the
            # receiver is not waiting, and finds the pipe closed once it has drained it.
            self.queue.put_nowait(_CLOSED)


class PipeSender(Generic[T]):
    def __init__(self, state: _PipeState[T]) -> None:
        self._state = state
        self._open = True
        self._released = False
        self._in_flight = 0
        state.senders += 1

    async def send(self, item: T) -> None:
        if not self._open:
            raise PipeClosed("send on a closed sender")
        if self._state.receiver_closed:
            raise PipeClosed("the receiver has gone away")
        queue = self._state.queue
        try:
            # Nothing to wait for, so no window in which a close could overtake the item.
            queue.put_nowait(item)
        except asyncio.QueueFull:
            await self._put_when_room(queue, item)

    async def _put_when_room(self, queue: asyncio.Queue[T | _Closed], item: T) -> None:
        """Wait for room, counted in flight: a close meanwhile waits for this item."""
        self._in_flight += 1
        try:
            await queue.put(item)
        finally:
            self._in_flight -= 1
            if not self._open:
                self._release()

    def clone(self) -> PipeSender[T]:
        if not self._open:
            raise PipeClosed("cannot clone a closed sender")
        return PipeSender(self._state)

    def close(self) -> None:
        """Idempotent: closing twice counts once.

        A send already waiting on a full pipe (in another task) still delivers its item; the
        sender counts as gone only after it, so the receiver's `None` never overtakes it.
        """
        self._open = False
        self._release()

    def _release(self) -> None:
        if not self._released and self._in_flight == 0:
            self._released = True
            self._state.sender_gone()

    @property
    def is_closed(self) -> bool:
        return not self._open

    def depth(self) -> int:
        return self._state.queue.qsize()


class PipeReceiver(Generic[T]):
    def __init__(self, state: _PipeState[T]) -> None:
        self._state = state

    async def recv(self) -> T | None:
        """The next item, or `None` once every sender is closed and the pipe is drained."""
        state = self._state
        queue = state.queue
        try:
            item = queue.get_nowait()
        except asyncio.QueueEmpty:
            if state.senders == 0 or state.receiver_closed:
                return None
            item = await queue.get()
        if isinstance(item, _Closed):
            return None
        return item

    def close(self) -> None:
        """Take no more: senders get `PipeClosed`; `recv` returns what is queued, then `None`."""
        state = self._state
        if state.receiver_closed:
            return
        state.receiver_closed = True
        if not state.queue.full():
            # Wakes a `recv` waiting on an empty queue; a full one is drained first.
            state.queue.put_nowait(_CLOSED)

    def depth(self) -> int:
        return self._state.queue.qsize()

    def __aiter__(self) -> AsyncIterator[T]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[T]:
        while (item := await self.recv()) is not None:
            yield item


def pipe(capacity: int) -> tuple[PipeSender[T], PipeReceiver[T]]:
    state: _PipeState[T] = _PipeState(capacity)
    return PipeSender(state), PipeReceiver(state)


DEFAULT_CAPACITY = 4096


@dataclass(frozen=True, slots=True)
class Admitted(Generic[Item]):
    """A message its log took: `item` goes to the agent side at once, `durable` resolves once
    the write is on disk (or raises: the sender is refused and the platform sends it again)."""

    item: Item
    durable: asyncio.Future[None]


class InboundLog(Protocol[Item]):
    """Where the publisher sends each inbound message before the agent side sees it."""

    async def admit(self, message: InboundMessage) -> Admitted[Item] | None:
        """Check `message` and start writing it; `None` when it goes no further (a refused
        sender, a platform's retry of a message the log holds, or a log that is itself the
        way to the agents, as JetStream in a cluster). Raises what `InboundSender.send` may."""
        ...


class _Unlogged:
    """The log of a bus without one: the message is the item, durable once queued."""

    async def admit(self, message: InboundMessage) -> Admitted[InboundMessage]:
        queued = asyncio.get_running_loop().create_future()
        queued.set_result(None)
        return Admitted(message, queued)


class PublishingSender(Generic[Item]):
    """One channel's sender: its messages go through the bus's log, then to the agent side."""

    def __init__(self, publisher: BusPublisher[Item]) -> None:
        self._publisher = publisher
        self._pipe = publisher._inbound.clone()

    async def send(self, message: InboundMessage) -> None:
        if self._pipe.is_closed:
            raise PipeClosed("send on a closed sender")
        admitted = await self._publisher.log.admit(message)
        if admitted is None:
            return
        # No await between the log's write and the queue while the queue has room: the agent
        # side receives a profile's messages in the order its log holds them.
        await self._pipe.send(admitted.item)
        await admitted.durable

    def close(self) -> None:
        self._pipe.close()

    @property
    def is_closed(self) -> bool:
        return self._pipe.is_closed


class AgentHandle(Generic[Item]):
    """The agent's end: receives inbound messages, sends outbound events."""

    def __init__(self, inbound: PipeReceiver[Item], outbound: PipeSender[OutboundEvent]) -> None:
        self._inbound = inbound
        self._outbound = outbound

    async def recv(self) -> Item | None:
        """The next inbound message, or `None` once every channel's sender is closed (or
        `stop_receiving` was called) and what was queued is taken."""
        return await self._inbound.recv()

    def __aiter__(self) -> AsyncIterator[Item]:
        return aiter(self._inbound)

    def stop_receiving(self) -> None:
        """Take no more inbound messages: channels' sends raise `PipeClosed` (their messages
        stay with the platform, or in the log for the next start)."""
        self._inbound.close()

    async def send(self, event: OutboundEvent) -> None:
        await self._outbound.send(event)

    def outbound_sender(self) -> PipeSender[OutboundEvent]:
        return self._outbound.clone()

    def close(self) -> None:
        """No more replies: the publisher's `recv_outbound` returns `None` once drained."""
        self._outbound.close()

    def inbound_depth(self) -> int:
        return self._inbound.depth()

    def outbound_depth(self) -> int:
        return self._outbound.depth()


class BusPublisher(Generic[Item]):
    """The channels' end: publishes inbound messages, receives outbound events."""

    def __init__(
        self,
        inbound: PipeSender[Item],
        outbound: PipeReceiver[OutboundEvent],
        log: InboundLog[Item] | None,
    ) -> None:
        self._inbound = inbound
        self._outbound = outbound
        self._log = log

    @property
    def log(self) -> InboundLog[Item]:
        if self._log is None:
            raise RuntimeError("this bus's inbound log is not bound yet: call log_through first")
        return self._log

    def log_through(self, log: InboundLog[Item]) -> None:
        """Bind the log every inbound message goes through (once: it answers refusals and
        retries through this same bus, so it is made after it)."""
        if self._log is not None:
            raise RuntimeError("this bus's inbound log is bound already")
        self._log = log

    def inbound_sender(self) -> InboundSender:
        """A sender of its own for one channel; close it when the channel stops."""
        return PublishingSender(self)

    async def publish(self, message: InboundMessage) -> None:
        """`send` of a sender of the publisher's own: returns once `message` is durable."""
        admitted = await self.log.admit(message)
        if admitted is not None:
            await self._inbound.send(admitted.item)
            await admitted.durable

    async def recv_outbound(self) -> OutboundEvent | None:
        return await self._outbound.recv()

    def outbound(self) -> AsyncIterator[OutboundEvent]:
        return aiter(self._outbound)

    def close(self) -> None:
        """Closes the publisher's own inbound sender; clones handed to channels stay open."""
        self._inbound.close()

    def outbound_depth(self) -> int:
        return self._outbound.depth()


@overload
def create_bus(
    capacity: int = DEFAULT_CAPACITY,
) -> tuple[AgentHandle[InboundMessage], BusPublisher[InboundMessage]]: ...
@overload
def create_bus(
    capacity: int = DEFAULT_CAPACITY, *, carries: type[Item]
) -> tuple[AgentHandle[Item], BusPublisher[Item]]: ...
def create_bus(
    capacity: int = DEFAULT_CAPACITY, *, carries: type[Any] | None = None
) -> tuple[AgentHandle[Any], BusPublisher[Any]]:
    """The two ends. `carries`: what the inbound log (bound later with `log_through`) hands
    the agent side; without it, the messages themselves, with no log between."""
    inbound_tx: PipeSender[Any]
    inbound_rx: PipeReceiver[Any]
    inbound_tx, inbound_rx = pipe(capacity)
    outbound_tx: PipeSender[OutboundEvent]
    outbound_rx: PipeReceiver[OutboundEvent]
    outbound_tx, outbound_rx = pipe(capacity)
    log: InboundLog[Any] | None = _Unlogged() if carries is None else None
    return AgentHandle(inbound_rx, outbound_tx), BusPublisher(inbound_tx, outbound_rx, log)
