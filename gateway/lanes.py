"""Per-chat lanes: one item at a time per chat, the rest queued by the profile's queue mode.

A lane holds a chat's pending work in arrival order: agent turns and the commands that change
which session the chat talks to (so "/new x" followed by "hello" sends hello to x). While a turn
runs, new messages wait: `collect` joins consecutive waiting messages into one turn, `followup`
runs them one by one, `interrupt` cancels the running turn and keeps only the newest message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import structlog

from bus import InboundMessage

log = structlog.get_logger(__name__)

QueueMode = Literal["collect", "followup", "interrupt"]

#: How many items may wait behind a running one; octos keeps a per-session inbox of 32.
MAX_PENDING = 32


@dataclass(frozen=True, slots=True)
class TurnItem:
    messages: tuple[InboundMessage, ...]

    @property
    def trigger(self) -> InboundMessage:
        return self.messages[-1]

    def content(self) -> str:
        first, *rest = self.messages
        queued = "".join(
            f"\n---\nQueued #{number}: {message.content}"
            for number, message in enumerate(rest, start=2)
        )
        return first.content + queued


@dataclass(frozen=True, slots=True)
class CommandItem:
    message: InboundMessage


LaneItem = TurnItem | CommandItem
Runner = Callable[[LaneItem], Awaitable[None]]


@dataclass(eq=False)
class Lane:
    pending: list[LaneItem] = field(default_factory=list)
    current: asyncio.Task[None] | None = None
    worker: asyncio.Task[None] | None = None


class Lanes:
    """All chats' lanes of one profile; workers live in the task group the owner passes in."""

    def __init__(self, mode: QueueMode, run_item: Runner, tasks: asyncio.TaskGroup) -> None:
        self._mode = mode
        self._run_item = run_item
        self._tasks = tasks
        self._lanes: dict[str, Lane] = {}

    def __len__(self) -> int:
        return len(self._lanes)

    def busy(self, chat: str) -> bool:
        lane = self._lanes.get(chat)
        return lane is not None and lane.current is not None

    def pending_count(self) -> int:
        return sum(len(lane.pending) for lane in self._lanes.values())

    def submit(self, chat: str, item: LaneItem) -> bool:
        """Queue `item`; False when the lane is full and the item was refused."""
        lane = self._lanes.setdefault(chat, Lane())
        if isinstance(item, TurnItem) and self._mode == "interrupt" and lane.current is not None:
            lane.pending = [queued for queued in lane.pending if not isinstance(queued, TurnItem)]
            lane.current.cancel()
        if len(lane.pending) >= MAX_PENDING:
            return False
        lane.pending.append(item)
        if lane.worker is None:
            lane.worker = self._tasks.create_task(self._drain(chat, lane), name=f"lane:{chat}")
        return True

    def abort(self, chat: str) -> bool:
        """Cancel the running item and drop what waits; True if something was cancelled."""
        lane = self._lanes.get(chat)
        if lane is None:
            return False
        dropped = bool(lane.pending)
        lane.pending.clear()
        if lane.current is not None:
            lane.current.cancel()
            return True
        return dropped

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
        messages = list(head.messages)
        while lane.pending and isinstance(following := lane.pending[0], TurnItem):
            lane.pending.pop(0)
            messages.extend(following.messages)
        return TurnItem(tuple(messages))

    async def _guarded(self, chat: str, item: LaneItem) -> None:
        # Supervision point (per message): one failing item must not take the lane, or the
        # task group it lives in, down with it.
        try:
            await self._run_item(item)
        except Exception:
            log.exception("lane item failed", chat=chat)

    async def _drain(self, chat: str, lane: Lane) -> None:
        try:
            while lane.pending:
                item = self._next(lane)
                lane.current = self._tasks.create_task(
                    self._guarded(chat, item), name=f"lane-item:{chat}"
                )
                # asyncio.wait, unlike awaiting the task, does not raise when only the item was
                # cancelled (abort, interrupt): the lane goes on with what waits.
                await asyncio.wait([lane.current])
                if lane.current.cancelled():
                    log.info("lane item cancelled", chat=chat)
                lane.current = None
        finally:
            lane.worker = None
            if not lane.pending:
                self._lanes.pop(chat, None)
