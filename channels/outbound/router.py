"""The outbound router: from the bus to per-chat delivery lanes (`bus.lanes`).

Events for one chat (channel, chat_id) are delivered one at a time, in order, by that chat's
lane; different chats proceed concurrently, at most `max_active_chats` of each channel at once,
so one slow chat (a rate limit, a long retry) does not hold the others back, nor a channel whose
platform is down (its replies retried for hours) the other channels: a chat past its channel's
count waits in its own lane, in arrival order, and the router reads on. The router never
waits to read, so no event stands in front of another channel's: what bounds its lanes is
upstream. In one process, the bus has each channel's replies wait for a place
(`bus.queue.ReplyPlaces`) that the router gives back as each event's delivery ends (`finished`);
in a cluster's ingress, a reply reaches the router only as a hand-over, one per outbound
partition at a time, beside the live events of the turns it shows.

A stream snapshot with a newer snapshot or the final reply of the same stream queued behind it
is skipped: snapshots are whole texts, so only the newest matters.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from bus import OutboundEvent, OutboundMessage, StreamSnapshot
from bus.lanes import KeyedLanes, Lane

log = structlog.get_logger(__name__)

LaneKey = tuple[str, str]


def _stream_of(event: OutboundEvent) -> str | None:
    """The stream a snapshot or a streamed reply's final belongs to; None for anything else."""
    match event:
        case StreamSnapshot() | OutboundMessage():
            return event.stream_id
        case _:
            return None


#: (sequence number, event, its stream): the stream found once, when the event is queued
_Queued = tuple[int, OutboundEvent, str | None]


@dataclass(eq=False)
class _Lane(Lane[_Queued]):
    #: stream_id -> sequence number of that stream's newest event in this lane
    newest: dict[str, int] = field(default_factory=dict)

    def superseded(self, seq: int, event: OutboundEvent, stream_id: str | None) -> bool:
        if stream_id is None:
            return False
        newest = self.newest.get(stream_id, seq)
        if newest == seq:
            del self.newest[stream_id]
        return isinstance(event, StreamSnapshot) and newest > seq


class OutboundRouter(KeyedLanes[LaneKey, _Queued, _Lane]):
    """Reads one outbound source and delivers it through per-chat lanes; one router per run."""

    def __init__(
        self,
        deliver: Callable[[OutboundEvent], Awaitable[None]],
        source_depth: Callable[[], int],
        *,
        finished: Callable[[OutboundEvent], None] = lambda event: None,
        max_active_chats: int = 64,
    ) -> None:
        super().__init__()
        if max_active_chats < 1:
            raise ValueError(f"max_active_chats must be at least 1, got {max_active_chats}")
        self._deliver = deliver
        self._finished_with = finished
        self._source_depth = source_depth
        self._max_active_chats = max_active_chats
        #: Per channel: how many of its lanes deliver now, and those waiting for one to end.
        self._delivering: dict[str, int] = {}
        self._waiting: dict[str, deque[tuple[LaneKey, _Lane]]] = {}
        self._lanes_group: asyncio.TaskGroup | None = None
        self._seq = 0
        self._in_flight = 0
        self._changed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._finished = False

    @property
    def active_chats(self) -> int:
        """Chats with events queued or being delivered (waiting for their turn or not)."""
        return len(self._lanes)

    async def run(self, source: AsyncIterator[OutboundEvent]) -> None:
        """Until the source ends (or `close_intake()`) and every lane has delivered."""
        try:
            async with asyncio.TaskGroup() as group:
                self._lanes_group = group
                self._reader = group.create_task(self._read(source), name="outbound-reader")
        finally:
            self._finished = True
            self._changed.set()

    def close_intake(self) -> None:
        """Stop reading the source; what the lanes already hold is still delivered."""
        if self._reader is not None:
            self._reader.cancel()

    async def wait_idle(self) -> None:
        """Until every event read so far is delivered and the source has nothing waiting,
        or the router has finished."""
        while True:
            self._changed.clear()
            if self._finished or (self._in_flight == 0 and self._source_depth() == 0):
                return
            await self._changed.wait()

    async def _read(self, source: AsyncIterator[OutboundEvent]) -> None:
        async for event in source:
            self._in_flight += 1
            # No await between finding the lane and appending: a lane only closes when empty.
            lane = self._lane_for(event)
            self._seq += 1
            stream_id = _stream_of(event)
            lane.pending.append((self._seq, event, stream_id))
            if stream_id is not None:
                lane.newest[stream_id] = self._seq

    def _lane_for(self, event: OutboundEvent) -> _Lane:
        """The chat's lane, opened when needed (delivering, or waiting for its channel's turn)."""
        key = (event.channel, event.chat_id)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._open_waiting(key)
            delivering = self._delivering.get(event.channel, 0)
            if delivering < self._max_active_chats:
                self._delivering[event.channel] = delivering + 1
                self._start_delivering(key, lane)
            else:
                self._waiting.setdefault(event.channel, deque()).append((key, lane))
        return lane

    def _start_delivering(self, key: LaneKey, lane: _Lane) -> None:
        assert self._lanes_group is not None
        self._start(key, lane, self._lanes_group, f"deliver:{key[0]}:{key[1]}")

    def _new_lane(self) -> _Lane:
        return _Lane()

    async def _run(self, key: LaneKey, lane: _Lane, item: _Queued) -> None:
        seq, event, stream_id = item
        try:
            if not lane.superseded(seq, event, stream_id):
                await self._deliver(event)
        except Exception as exc:
            # Supervision point (per message): one bad event must never stop the router.
            log.error(
                "router.outbound_failed",
                channel=event.channel,
                chat_id=event.chat_id,
                error=f"{type(exc).__name__}: {exc}",
                exc_info=exc,
            )
        finally:
            self._finished_with(event)
            self._in_flight -= 1
            self._changed.set()

    def _closed(self, key: LaneKey) -> None:
        channel = key[0]
        waiting = self._waiting.get(channel)
        if waiting:
            # The ended lane's place goes to the channel's longest waiting chat.
            next_key, next_lane = waiting.popleft()
            if not waiting:
                del self._waiting[channel]
            try:
                self._start_delivering(next_key, next_lane)
            except RuntimeError:
                # The router is being stopped (its task group takes no new task): what waits
                # goes with it, as what the lanes hold does; a journaled reply is delivered
                # again at the next start.
                self._delivering[channel] -= 1
        else:
            self._delivering[channel] -= 1
            if not self._delivering[channel]:
                del self._delivering[channel]
        self._changed.set()
