"""Per-chat lanes: the one ordering mechanism of a profile's turns.

A lane holds a chat's pending work in arrival order: agent turns and the commands that change
which session the chat talks to (so "/new x" followed by "hello" sends hello to x). A chat's
sessions all belong to its lane, so one item at a time per lane also orders each session's
writes. While a turn runs, new messages wait: `collect` joins consecutive waiting messages into
one turn, `followup` runs them one by one, `interrupt` cancels the running turn and keeps only
the newest message. A lane exists only while it has work: an idle chat costs no task.

Every item is already durable in the journal; the lane holds no more than the intake's backlog
bound lets in. Items dropped (abort, interrupt) are handed to `on_dropped`, so the journal can
record that they will not be answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import structlog

from gateway.journal import Received

log = structlog.get_logger(__name__)

QueueMode = Literal["collect", "followup", "interrupt"]


@dataclass(frozen=True, slots=True)
class TurnItem:
    received: tuple[Received, ...]

    @property
    def trigger(self) -> Received:
        return self.received[-1]

    @property
    def ids(self) -> list[int]:
        return [item.id for item in self.received]

    def content(self) -> str:
        first, *rest = self.received
        queued = "".join(
            f"\n---\nQueued #{number}: {item.message.content}"
            for number, item in enumerate(rest, start=2)
        )
        return first.message.content + queued


@dataclass(frozen=True, slots=True)
class CommandItem:
    received: Received

    @property
    def trigger(self) -> Received:
        return self.received

    @property
    def ids(self) -> list[int]:
        return [self.received.id]


LaneItem = TurnItem | CommandItem
Runner = Callable[[LaneItem], Awaitable[None]]
Dropped = Callable[[list[LaneItem]], None]


@dataclass(eq=False)
class Lane:
    pending: list[LaneItem] = field(default_factory=list)
    current: asyncio.Task[None] | None = None
    current_item: LaneItem | None = None
    worker: asyncio.Task[None] | None = None


class Lanes:
    """All chats' lanes of one profile; workers live in the task group the owner passes in."""

    def __init__(
        self, mode: QueueMode, run_item: Runner, tasks: asyncio.TaskGroup, on_dropped: Dropped
    ) -> None:
        self._mode = mode
        self._run_item = run_item
        self._tasks = tasks
        self._on_dropped = on_dropped
        self._lanes: dict[str, Lane] = {}

    def __len__(self) -> int:
        return len(self._lanes)

    def busy(self, chat: str) -> bool:
        lane = self._lanes.get(chat)
        return lane is not None and lane.current is not None

    def backlog(self, chat: str) -> int:
        """How many messages of `chat` wait or run."""
        lane = self._lanes.get(chat)
        if lane is None:
            return 0
        waiting = sum(len(item.ids) for item in lane.pending)
        return waiting + (len(lane.current_item.ids) if lane.current_item is not None else 0)

    def submit(self, chat: str, item: LaneItem) -> None:
        """Queue `item` behind the chat's earlier work."""
        lane = self._lanes.setdefault(chat, Lane())
        if isinstance(item, TurnItem) and self._mode == "interrupt" and lane.current is not None:
            dropped: list[LaneItem] = [q for q in lane.pending if isinstance(q, TurnItem)]
            lane.pending = [queued for queued in lane.pending if not isinstance(queued, TurnItem)]
            self._cancel_current(lane, dropped)
        lane.pending.append(item)
        if lane.worker is None:
            lane.worker = self._tasks.create_task(self._drain(chat, lane), name=f"lane:{chat}")

    def abort(self, chat: str) -> bool:
        """Cancel the running item and drop what waits; True if something was cancelled."""
        lane = self._lanes.get(chat)
        if lane is None:
            return False
        dropped, lane.pending = lane.pending, []
        if lane.current is not None:
            self._cancel_current(lane, dropped)
            return True
        if dropped:
            self._on_dropped(dropped)
        return bool(dropped)

    def _cancel_current(self, lane: Lane, dropped: list[LaneItem]) -> None:
        assert lane.current is not None
        if lane.current_item is not None and not lane.current.done():
            dropped = [lane.current_item, *dropped]
            lane.current_item = None
        lane.current.cancel()
        if dropped:
            self._on_dropped(dropped)

    async def wait_idle(self) -> None:
        """Return once no lane has running or waiting work."""
        while workers := [lane.worker for lane in self._lanes.values() if lane.worker]:
            await asyncio.wait(workers)

    async def wait_idle_of(self, chat: str) -> None:
        """Return once `chat`'s lane has nothing running or waiting."""
        lane = self._lanes.get(chat)
        if lane is not None and lane.worker is not None:
            await asyncio.wait([lane.worker])

    def _next(self, lane: Lane) -> LaneItem:
        head = lane.pending.pop(0)
        if not isinstance(head, TurnItem) or self._mode != "collect":
            return head
        received = list(head.received)
        while lane.pending and isinstance(following := lane.pending[0], TurnItem):
            lane.pending.pop(0)
            received.extend(following.received)
        return TurnItem(tuple(received))

    async def _guarded(self, chat: str, item: LaneItem) -> None:
        # Supervision point (per message): one failing item must not take the lane, or the
        # task group it lives in, down with it.
        try:
            await self._run_item(item)
        except Exception:
            log.exception("lane.item_failed", chat=chat)

    async def _drain(self, chat: str, lane: Lane) -> None:
        try:
            while lane.pending:
                item = self._next(lane)
                lane.current_item = item
                lane.current = self._tasks.create_task(
                    self._guarded(chat, item), name=f"lane-item:{chat}"
                )
                # asyncio.wait, unlike awaiting the task, does not raise when only the item was
                # cancelled (abort, interrupt): the lane goes on with what waits.
                await asyncio.wait([lane.current])
                if lane.current.cancelled():
                    log.info("lane.item_cancelled", chat=chat)
                lane.current = None
                lane.current_item = None
        finally:
            lane.worker = None
            if not lane.pending:
                self._lanes.pop(chat, None)
