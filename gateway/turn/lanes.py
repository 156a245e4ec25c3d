"""A profile's turns in per-chat lanes (`bus.lanes`, the ordering mechanism of both sides of
the bus).

A lane holds a chat's pending work in arrival order: agent turns and the commands that change
which session the chat talks to (so "/new x" followed by "hello" sends hello to x). A chat's
sessions all belong to its lane, so one item at a time per lane also orders each session's
writes. While a turn runs, new messages wait: `collect` joins consecutive waiting messages into
one turn, `followup` runs them one by one, `interrupt` cancels the running turn and keeps only
the newest message.

Every item is in the journal (durable, or its record on its way to the disk: the item's
reply waits for its outcome, a later record); the lane holds no more than the intake's backlog
bound lets in. Items dropped (abort, interrupt) are handed to `on_dropped`, so the journal can
record that they will not be answered.

An item runs in its lane's own task, in two phases: the work (an agent turn), which an abort or
an interrupt cancels, and then its commit (record the outcome, write the session, send the
reply), which nothing but shutdown interrupts: a reply that exists is answered. One task per
busy chat, none per item.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import structlog

from bus.lanes import KeyedLanes
from bus.lanes import Lane as KeyedLane
from gateway.turn.journal import OwnerSend, Received

log = structlog.get_logger(__name__)

QueueMode = Literal["collect", "followup", "interrupt"]


def collected_content(contents: Sequence[str]) -> str:
    """Messages collected into one turn, as the agent and the session see them: the first,
    then each queued one numbered."""
    first, *rest = contents
    queued = "".join(
        f"\n---\nQueued #{number}: {content}" for number, content in enumerate(rest, start=2)
    )
    return first + queued


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
        if len(self.received) == 1:
            return self.received[0].message.content  # what collecting one message gives
        return collected_content([item.message.content for item in self.received])


@dataclass(frozen=True, slots=True)
class CommandItem:
    received: Received

    @property
    def trigger(self) -> Received:
        return self.received

    @property
    def ids(self) -> list[int]:
        return [self.received.id]


@dataclass(frozen=True, slots=True)
class SendItem:
    """An owner's send (`gateway.turn.outbox`), due: it answers no message, and neither a stop
    nor an interrupt drops it (the owner asked for it, not the chat)."""

    send: OwnerSend

    @property
    def ids(self) -> list[int]:
        return []


LaneItem = TurnItem | CommandItem | SendItem
#: What an item does once its work is done and can no longer be cancelled by an abort.
Commit = Callable[[], Awaitable[None]]
#: Does an item's work; returns its commit, or None when there is nothing to commit.
Runner = Callable[[LaneItem], Awaitable[Commit | None]]
Dropped = Callable[[list[LaneItem]], None]


@dataclass(eq=False)
class Lane(KeyedLane[LaneItem]):
    current_item: LaneItem | None = None
    #: The current item is past its work: an abort no longer cancels it.
    committing: bool = False
    #: An abort cancelled the worker; the CancelledError it gets is ours, not shutdown's.
    aborting: bool = False


class Lanes(KeyedLanes[str, LaneItem, Lane]):
    """All chats' lanes of one profile; workers live in the task group the owner passes in."""

    def __init__(
        self, mode: QueueMode, run_item: Runner, tasks: asyncio.TaskGroup, on_dropped: Dropped
    ) -> None:
        super().__init__(self._collected if mode == "collect" else deque.popleft)
        self._mode = mode
        self._run_item = run_item
        self._tasks = tasks
        self._on_dropped = on_dropped

    def _new_lane(self) -> Lane:
        return Lane()

    def busy(self, chat: str) -> bool:
        lane = self._lanes.get(chat)
        return lane is not None and lane.current_item is not None

    def backlog(self, chat: str) -> int:
        """How many messages of `chat` wait or run."""
        lane = self._lanes.get(chat)
        if lane is None:
            return 0
        waiting = sum(len(item.ids) for item in lane.pending)
        return waiting + (len(lane.current_item.ids) if lane.current_item is not None else 0)

    def submit(self, chat: str, item: LaneItem) -> None:
        """Queue `item` behind the chat's earlier work."""
        lane = self._lanes.get(chat)
        if lane is None:
            lane = self._open(chat, self._tasks, f"lane:{chat}")
        elif (
            isinstance(item, TurnItem)
            and self._mode == "interrupt"
            and lane.current_item is not None
        ):
            dropped: list[LaneItem] = [q for q in lane.pending if isinstance(q, TurnItem)]
            kept = [queued for queued in lane.pending if not isinstance(queued, TurnItem)]
            lane.pending.clear()
            lane.pending.extend(kept)
            self._cancel_current(lane, dropped)
        lane.pending.append(item)

    def abort(self, chat: str) -> bool:
        """Cancel the running item and drop what waits (but the owner's sends); True if
        something was cancelled."""
        lane = self._lanes.get(chat)
        if lane is None:
            return False
        dropped: list[LaneItem] = [i for i in lane.pending if not isinstance(i, SendItem)]
        kept = [i for i in lane.pending if isinstance(i, SendItem)]
        lane.pending.clear()
        lane.pending.extend(kept)
        cancelled = self._cancel_current(lane, dropped)
        return cancelled or bool(dropped)

    def _cancel_current(self, lane: Lane, dropped: list[LaneItem]) -> bool:
        """Cancel the current item's work (not its commit); hand what is dropped over."""
        cancelled = False
        if (
            lane.current_item is not None
            and not isinstance(lane.current_item, SendItem)
            and not lane.committing
            and not lane.aborting
            and lane.worker is not None
        ):
            dropped = [lane.current_item, *dropped]
            lane.aborting = True
            lane.worker.cancel()
            cancelled = True
        if dropped:
            self._on_dropped(dropped)
        return cancelled

    async def wait_idle(self) -> None:
        """Return once no lane has running or waiting work."""
        while workers := [lane.worker for lane in self._lanes.values() if lane.worker]:
            await asyncio.wait(workers)

    async def wait_idle_of(self, chat: str) -> None:
        """Return once `chat`'s lane has nothing running or waiting."""
        lane = self._lanes.get(chat)
        if lane is not None and lane.worker is not None:
            await asyncio.wait([lane.worker])

    @staticmethod
    def _collected(pending: deque[LaneItem]) -> LaneItem:
        """The first item; a turn with the turns queued right behind it joined into one."""
        head = pending.popleft()
        if not isinstance(head, TurnItem):
            return head
        received = list(head.received)
        while pending and isinstance(following := pending[0], TurnItem):
            pending.popleft()
            received.extend(following.received)
        return TurnItem(tuple(received))

    async def _run(self, chat: str, lane: Lane, item: LaneItem) -> None:
        lane.current_item, lane.committing = item, False
        try:
            commit = await self._run_item(item)
            lane.committing = True
            if commit is not None:
                await commit()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            assert task is not None
            if not lane.aborting or task.uncancel() > 0:
                raise  # shutdown, not (only) an abort
            log.info("lane.item_cancelled", chat=chat)
        except Exception:
            # Supervision point (per message): one failing item must not take the lane, or the
            # task group it lives in, down with it.
            log.exception("lane.item_failed", chat=chat)
        finally:
            lane.current_item, lane.committing, lane.aborting = None, False, False
