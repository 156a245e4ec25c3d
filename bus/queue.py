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

Outbound, a bus made with `replies_per_channel` bounds each channel apart (`ReplyPlaces`): at
most that many of a channel's replies are between the agent side and the end of their delivery;
a further reply to that channel waits, in order, while every other channel's go on. So a
platform that is down holds back the turns that answer its own chats, and no others. Its outbound
queue is then not bounded by `capacity`: its consumer (the channels' router) reads on without
waiting, and what it reads besides replies (typing, stream snapshots) comes from running turns.

`create_bus` returns the two ends. Nothing above the bus may depend on it being in-process:
the same two interfaces can run over a broker.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, overload

from typing_extensions import TypeVar

from bus.envelope import InboundMessage, InboundSender, OutboundEvent, OutboundMessage

T = TypeVar("T")
#: What the agent side receives for each inbound message: the message, or what its log made of it.
Item = TypeVar("Item", default=InboundMessage)


class PipeClosed(RuntimeError):
    """Sent on a sender that was closed, or after the receiver went away."""


class _Closed:
    """Marker queued behind the last item when the last sender closes."""


_CLOSED = _Closed()


class _PipeState(Generic[T]):
    def __init__(self, capacity: int | None) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError(f"pipe capacity must be at least 1, got {capacity}")
        self.queue: asyncio.Queue[T | _Closed] = asyncio.Queue(capacity or 0)
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

    def put_now(self, item: T) -> None:
        """`send` on a pipe without a bound, which never waits."""
        if not self._open:
            raise PipeClosed("send on a closed sender")
        if self._state.receiver_closed:
            raise PipeClosed("the receiver has gone away")
        assert self._state.queue.maxsize == 0, "put_now on a bounded pipe"
        self._state.queue.put_nowait(item)

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


def pipe(capacity: int | None) -> tuple[PipeSender[T], PipeReceiver[T]]:
    """A pipe holding `capacity` items before senders wait; None: without a bound."""
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


@dataclass(eq=False, slots=True)
class _ChannelPlaces:
    placed: int = 0
    #: Replies waiting for a place, in the order they were sent; a future per waiting sender.
    waiting: deque[tuple[OutboundMessage, asyncio.Future[None] | None]] = field(
        default_factory=deque
    )


class ReplyPlaces:
    """At most `per_channel` replies of each channel between the agent side and the end of
    their delivery; past that a channel's replies wait, in the order sent, and go into the
    outbound pipe (`put`) as its earlier ones finish."""

    def __init__(self, per_channel: int, put: Callable[[OutboundMessage], None]) -> None:
        if per_channel < 1:
            raise ValueError(f"replies_per_channel must be at least 1, got {per_channel}")
        self._per_channel = per_channel
        self._put = put
        self._channels: dict[str, _ChannelPlaces] = {}

    def waiting(self, channel: str) -> int:
        places = self._channels.get(channel)
        if places is None:
            return 0
        return sum(1 for _, waiter in places.waiting if waiter is None or not waiter.done())

    async def send(self, reply: OutboundMessage) -> None:
        """Into the pipe once its channel has a place; cancelled while waiting, it is not sent."""
        waiter = self._place_or_wait(reply, answer=True)
        if waiter is not None:
            await waiter

    def send_later(self, reply: OutboundMessage) -> None:
        """Into the pipe now if its channel has a place, or else behind its channel's waiting
        replies, without waiting for it here."""
        self._place_or_wait(reply, answer=False)

    def finished(self, reply: OutboundMessage) -> None:
        """Its delivery ended (delivered, given up or dead-lettered): the next waiting reply
        of its channel takes the place."""
        places = self._channels.get(reply.channel)
        if places is None or not places.placed:
            return
        places.placed -= 1
        while places.waiting and places.placed < self._per_channel:
            waiting, waiter = places.waiting.popleft()
            if waiter is not None and waiter.done():
                continue  # its sender was cancelled
            self._put(waiting)
            places.placed += 1
            if waiter is not None:
                waiter.set_result(None)
        if not places.placed and not places.waiting:
            del self._channels[reply.channel]

    def close(self) -> None:
        """What still waits is not sent (a journaled reply goes out at the next start); its
        senders get `PipeClosed`."""
        for places in self._channels.values():
            for _, waiter in places.waiting:
                if waiter is not None and not waiter.done():
                    waiter.set_exception(PipeClosed("the bus closed before the reply had a place"))
            places.waiting.clear()

    def _place_or_wait(
        self, reply: OutboundMessage, *, answer: bool
    ) -> asyncio.Future[None] | None:
        """Puts the reply in the pipe if its channel has a place and nothing waits before it;
        otherwise queues it, with a future set once it is put when `answer` asks for one."""
        places = self._channels.setdefault(reply.channel, _ChannelPlaces())
        if places.placed < self._per_channel and not places.waiting:
            self._put(reply)
            places.placed += 1
            return None
        waiter = asyncio.get_running_loop().create_future() if answer else None
        places.waiting.append((reply, waiter))
        return waiter


class AgentHandle(Generic[Item]):
    """The agent's end: receives inbound messages, sends outbound events."""

    def __init__(
        self,
        inbound: PipeReceiver[Item],
        outbound: PipeSender[OutboundEvent],
        places: ReplyPlaces | None = None,
    ) -> None:
        self._inbound = inbound
        self._outbound = outbound
        self._places = places

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
        """Returns once the event is queued; a reply, with `replies_per_channel`, once its
        channel has a place for it."""
        if self._places is not None and isinstance(event, OutboundMessage):
            if self._outbound.is_closed:
                raise PipeClosed("send on a closed sender")
            await self._places.send(event)
        else:
            await self._outbound.send(event)

    async def send_in_order(self, replies: list[OutboundMessage]) -> None:
        """Each reply queued in turn, those past their channel's places waiting behind it
        without holding back the rest (what a start sends again: a channel whose platform
        is down keeps its own, not the other channels' nor the start)."""
        places = self._places
        for reply in replies:
            if places is None:
                await self._outbound.send(reply)
            else:
                places.send_later(reply)

    def outbound_sender(self) -> PipeSender[OutboundEvent]:
        if self._places is not None:
            raise RuntimeError("a bus with replies_per_channel has no second outbound sender")
        return self._outbound.clone()

    def close(self) -> None:
        """No more replies: the publisher's `recv_outbound` returns `None` once drained."""
        if self._places is not None:
            self._places.close()
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
        places: ReplyPlaces | None = None,
    ) -> None:
        self._inbound = inbound
        self._outbound = outbound
        self._log = log
        self._places = places

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

    def replies_waiting(self, channel: str) -> int:
        """Replies to `channel` waiting for a place (none on a bus without places)."""
        return self._places.waiting(channel) if self._places is not None else 0

    def finished(self, event: OutboundEvent) -> None:
        """The channels are done with `event` (delivered, given up, or skipped): a reply's
        place is free for its channel's next one."""
        if self._places is not None and isinstance(event, OutboundMessage):
            self._places.finished(event)

    def close(self) -> None:
        """Closes the publisher's own inbound sender; clones handed to channels stay open."""
        self._inbound.close()

    def outbound_depth(self) -> int:
        return self._outbound.depth()


@overload
def create_bus(
    capacity: int = DEFAULT_CAPACITY, *, replies_per_channel: int | None = None
) -> tuple[AgentHandle[InboundMessage], BusPublisher[InboundMessage]]: ...
@overload
def create_bus(
    capacity: int = DEFAULT_CAPACITY,
    *,
    carries: type[Item],
    replies_per_channel: int | None = None,
) -> tuple[AgentHandle[Item], BusPublisher[Item]]: ...
def create_bus(
    capacity: int = DEFAULT_CAPACITY,
    *,
    carries: type[Any] | None = None,
    replies_per_channel: int | None = None,
) -> tuple[AgentHandle[Any], BusPublisher[Any]]:
    """The two ends. `carries`: what the inbound log (bound later with `log_through`) hands
    the agent side; without it, the messages themselves, with no log between.
    `replies_per_channel`: outbound, each channel's replies bounded apart (`ReplyPlaces`, whose
    places the consumer gives back with `BusPublisher.finished`) instead of the whole queue by
    `capacity`."""
    inbound_tx: PipeSender[Any]
    inbound_rx: PipeReceiver[Any]
    inbound_tx, inbound_rx = pipe(capacity)
    outbound_tx: PipeSender[OutboundEvent]
    outbound_rx: PipeReceiver[OutboundEvent]
    places: ReplyPlaces | None = None
    if replies_per_channel is None:
        outbound_tx, outbound_rx = pipe(capacity)
    else:
        outbound_tx, outbound_rx = pipe(None)
        places = ReplyPlaces(replies_per_channel, outbound_tx.put_now)
    log: InboundLog[Any] | None = _Unlogged() if carries is None else None
    return (
        AgentHandle(inbound_rx, outbound_tx, places),
        BusPublisher(inbound_tx, outbound_rx, log, places),
    )
