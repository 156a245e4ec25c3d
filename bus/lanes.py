"""Keyed lanes: the one mechanism that orders work on each side of the bus.

Work for one key (a chat) runs one item at a time, in arrival order; different keys run
concurrently. A lane exists only while it has work: its first item opens it, one task drains
it, and it is gone once empty, so an idle chat costs no task and no memory.

The agent side orders a chat's turns, and with them its sessions' writes, in lanes
(`gateway.turn.lanes`); the channel side orders a chat's deliveries in lanes
(`channels.outbound.router`). They are two users of this one mechanism, not one object, because
replies cross the bus and nothing above the bus may depend on it being in-process: in a cluster
the two sides are different processes, each ordering with a JetStream consumer per partition with
`max_ack_pending=1`, as these lanes do in one process.

A subclass says what an item is and how one runs, and may say how the next one is taken from
what waits (a turn in `collect` mode takes the messages queued behind it with it).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

KeyT = TypeVar("KeyT", bound=Hashable)
ItemT = TypeVar("ItemT")


@dataclass(eq=False)
class Lane(Generic[ItemT]):
    """A key's waiting items and the task draining them (None only while a lane opened with
    `_open_waiting` waits for `_start`)."""

    pending: deque[ItemT] = field(default_factory=deque)
    worker: asyncio.Task[None] | None = None


LaneT = TypeVar("LaneT", bound=Lane[Any])


class KeyedLanes(ABC, Generic[KeyT, ItemT, LaneT]):
    """The open lanes, by key; each drained by its own task in the task group it is started in."""

    def __init__(self, take: Callable[[deque[ItemT]], ItemT] = deque.popleft) -> None:
        """`take` removes and returns the next item to run from what waits (never empty):
        by default the first, as it came."""
        self._lanes: dict[KeyT, LaneT] = {}
        self._take = take

    def __len__(self) -> int:
        """How many keys have work waiting or running."""
        return len(self._lanes)

    @abstractmethod
    def _new_lane(self) -> LaneT:
        """An empty lane."""

    @abstractmethod
    async def _run(self, key: KeyT, lane: LaneT, item: ItemT) -> None:
        """Run one item; an exception it lets out ends the lane."""

    def _closed(self, key: KeyT) -> None:
        """The lane of `key` has ended (empty, or its task stopped)."""

    def _open(self, key: KeyT, tasks: asyncio.TaskGroup, name: str) -> LaneT:
        """A new lane for `key` (which has none), drained by a task named `name` that starts
        once the caller has queued the lane's first item and given the loop back."""
        lane = self._open_waiting(key)
        self._start(key, lane, tasks, name)
        return lane

    def _open_waiting(self, key: KeyT) -> LaneT:
        """A new lane for `key` (which has none) that takes items but runs none until
        `_start`: work for a key that must wait its turn among keys, in its own order."""
        lane = self._lanes[key] = self._new_lane()
        return lane

    def _start(self, key: KeyT, lane: LaneT, tasks: asyncio.TaskGroup, name: str) -> None:
        """Drain `lane` in a task of `tasks`; RuntimeError when the group is stopping."""
        drain = self._drain(key, lane)
        try:
            lane.worker = tasks.create_task(drain, name=name)
        except RuntimeError:
            drain.close()  # never to run: closed, so it is not reported as never awaited
            raise

    async def _drain(self, key: KeyT, lane: LaneT) -> None:
        try:
            while lane.pending:
                await self._run(key, lane, self._take(lane.pending))
        finally:
            # What the lane still holds when its task stops early (shutdown) goes with it: the
            # agent side's items are in the journal and resumed from there at the next start.
            lane.worker = None
            del self._lanes[key]
            self._closed(key)
