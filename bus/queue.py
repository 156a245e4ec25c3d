"""The in-process bus: channels publish inbound messages, the agent side answers outbound.

Its pipes are bounded, multi-producer, single-consumer, with Rust mpsc close semantics:
senders can be cloned; when the last one is closed, the receiver drains what is queued and then
receives `None`, so a consumer stops without any other signal. A full pipe makes senders wait
(backpressure): nothing is ever dropped.

Outbound, the agent side sends typed events (`bus.envelope`): replies, stream snapshots and
typing signals, in the order the channels should see them.

`create_bus` returns the two ends. Nothing above the bus may depend on it being in-process:
the same two interfaces can run over a broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Generic, TypeVar

from bus.envelope import InboundMessage, OutboundEvent

T = TypeVar("T")


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
        if not queue.full():
            # Nothing to wait for, so no window in which a close could overtake the item.
            queue.put_nowait(item)
            return
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
        queue = self._state.queue
        if self._state.senders == 0 and queue.empty():
            return None
        item = await queue.get()
        if isinstance(item, _Closed):
            return None
        return item

    def close(self) -> None:
        self._state.receiver_closed = True

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


class AgentHandle:
    """The agent's end: receives inbound messages, sends outbound events."""

    def __init__(
        self, inbound: PipeReceiver[InboundMessage], outbound: PipeSender[OutboundEvent]
    ) -> None:
        self._inbound = inbound
        self._outbound = outbound

    async def recv(self) -> InboundMessage | None:
        """The next inbound message, or `None` once every channel's sender is closed."""
        return await self._inbound.recv()

    def __aiter__(self) -> AsyncIterator[InboundMessage]:
        return aiter(self._inbound)

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


# The mirror of `AgentHandle`, deliberately written out: each end holds the other halves of
# the same two pipes, and says what its side may do with them.
class BusPublisher:
    """The channels' end: publishes inbound messages, receives outbound events."""

    def __init__(
        self, inbound: PipeSender[InboundMessage], outbound: PipeReceiver[OutboundEvent]
    ) -> None:
        self._inbound = inbound
        self._outbound = outbound

    def inbound_sender(self) -> PipeSender[InboundMessage]:
        """A sender of its own for one channel; close it when the channel stops."""
        return self._inbound.clone()

    async def publish(self, message: InboundMessage) -> None:
        await self._inbound.send(message)

    async def recv_outbound(self) -> OutboundEvent | None:
        return await self._outbound.recv()

    def outbound(self) -> AsyncIterator[OutboundEvent]:
        return aiter(self._outbound)

    def close(self) -> None:
        """Closes the publisher's own inbound sender; clones handed to channels stay open."""
        self._inbound.close()

    def outbound_depth(self) -> int:
        return self._outbound.depth()


def create_bus(capacity: int = DEFAULT_CAPACITY) -> tuple[AgentHandle, BusPublisher]:
    inbound_tx: PipeSender[InboundMessage]
    inbound_rx: PipeReceiver[InboundMessage]
    inbound_tx, inbound_rx = pipe(capacity)
    outbound_tx: PipeSender[OutboundEvent]
    outbound_rx: PipeReceiver[OutboundEvent]
    outbound_tx, outbound_rx = pipe(capacity)
    return AgentHandle(inbound_rx, outbound_tx), BusPublisher(inbound_tx, outbound_rx)
