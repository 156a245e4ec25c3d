"""Session actors: one per active session key, its only writer, running its work in order.

`SessionActors.submit(key, work)` queues a work item on the key's actor and returns its result.
One key's items run strictly one after another, in submission order; different keys run
concurrently, at most `max_concurrent` at once. An actor with nothing to do for
`idle_timeout_s` stops and frees its slot in the registry; the next submit starts a new one.

Cancellation follows the submitter: cancelling the `submit` await drops the item if it has not
started and cancels it if it runs (how an abort trigger stops a turn). `cancel_running(key)`
cancels a running item from outside; its submitter then gets `WorkItemCancelled`. A work item
that raises is logged and its exception re-raised to the submitter; the actor carries on.

Actors and work items are named tasks of one TaskGroup, entered and left with
`async with SessionActors(...)`; leaving rejects queued items, lets running ones finish within
`shutdown_grace_s`, then cancels them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Generic, Literal, Self, TypeVar

import structlog

from bus import SessionKey
from sessions.errors import SessionActorsStopped, WorkItemCancelled

log = structlog.get_logger(__name__)

T = TypeVar("T")


class _WorkItem(Generic[T]):
    __slots__ = ("result", "task", "work")

    def __init__(self, work: Callable[[], Awaitable[T]], result: asyncio.Future[T]) -> None:
        self.work = work
        self.result = result
        self.task: asyncio.Task[None] | None = None


class SessionActor:
    """The single worker of one session key (created and owned by `SessionActors`)."""

    def __init__(self, key: SessionKey, owner: SessionActors, max_pending: int) -> None:
        self.key = key
        self._owner = owner
        self._queue: asyncio.Queue[_WorkItem[Any] | None] = asyncio.Queue(max_pending)
        self.current: _WorkItem[Any] | None = None  # taken off the queue, maybe awaiting a slot
        self.running: _WorkItem[Any] | None = None  # executing now
        self.task: asyncio.Task[None] | None = None
        self.closed = False

    @property
    def busy(self) -> bool:
        return self.current is not None or not self._queue.empty()

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def enqueue(self, item: _WorkItem[Any]) -> None:
        await self._queue.put(item)
        if self.closed:
            # Waited for room in a full queue while the actor ended: nobody will run it.
            self._reject_queued()

    def shut(self) -> None:
        """Reject every queued item and tell the actor to end after its running one."""
        self._reject_queued()
        self._queue.put_nowait(None)

    def _reject_queued(self) -> None:
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None and not item.result.done():
                item.result.set_exception(SessionActorsStopped())

    async def run(self) -> None:
        try:
            while (item := await self._next_item()) is not None:
                self.current = item
                try:
                    await self._execute(item)
                finally:
                    self.current = None
        finally:
            self.closed = True
            self._reject_queued()
            self._owner._retire(self)

    async def _next_item(self) -> _WorkItem[Any] | None:
        while True:
            try:
                async with asyncio.timeout(self._owner.idle_timeout_s):
                    return await self._queue.get()
            except TimeoutError:
                # No await between this check and leaving the registry: a submit either
                # queued before (and is served) or finds no actor and starts a new one.
                if self._queue.empty():
                    self._owner._retire(self)
                    return None

    async def _execute(self, item: _WorkItem[Any]) -> None:
        if item.result.done():
            return  # its submitter gave up before it started
        async with self._owner._slots:
            if item.result.done():
                return
            if not self._owner.running:
                item.result.set_exception(SessionActorsStopped())
                return
            task = self._owner._start_task(self._perform(item), f"session-work:{self.key}")
            item.task = task
            self.running = item
            item.result.add_done_callback(_cancel_when_abandoned(task))
            try:
                await asyncio.wait([task])
            except asyncio.CancelledError:
                task.cancel()  # the TaskGroup awaits it
                raise
            finally:
                self.running = None

    async def _perform(self, item: _WorkItem[Any]) -> None:
        try:
            value = await item.work()
        except asyncio.CancelledError:
            if not item.result.done():
                item.result.set_exception(WorkItemCancelled(str(self.key)))
            raise
        except Exception as error:
            log.exception("session work item failed", session=str(self.key))
            if not item.result.done():
                item.result.set_exception(error)
            return
        if not item.result.done():
            item.result.set_result(value)


def _cancel_when_abandoned(task: asyncio.Task[None]) -> Callable[[asyncio.Future[Any]], None]:
    def cancel(result: asyncio.Future[Any]) -> None:
        if result.cancelled():
            task.cancel()

    return cancel


class SessionActors:
    def __init__(
        self,
        max_concurrent: int = 10,
        idle_timeout_s: float = 1800.0,
        *,
        shutdown_grace_s: float = 30.0,
        max_pending: int = 1000,
    ) -> None:
        if max_concurrent < 1 or max_pending < 1:
            raise ValueError("max_concurrent and max_pending must be at least 1")
        if idle_timeout_s <= 0 or shutdown_grace_s < 0:
            raise ValueError("idle_timeout_s must be positive and shutdown_grace_s not negative")
        self.max_concurrent = max_concurrent
        self.idle_timeout_s = idle_timeout_s
        self.shutdown_grace_s = shutdown_grace_s
        self.max_pending = max_pending
        self._slots = asyncio.Semaphore(max_concurrent)
        self._actors: dict[SessionKey, SessionActor] = {}
        self._group: asyncio.TaskGroup | None = None
        self._state: Literal["new", "running", "stopping", "stopped"] = "new"

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError("SessionActors can be entered once")
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        self._state = "running"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()
        assert self._group is not None
        await self._group.__aexit__(exc_type, exc, traceback)

    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def active_count(self) -> int:
        """Actors alive (running, queued or waiting for work)."""
        return len(self._actors)

    @property
    def running_count(self) -> int:
        """Work items executing right now (at most `max_concurrent`)."""
        return sum(actor.running is not None for actor in self._actors.values())

    def actor(self, key: SessionKey) -> SessionActor | None:
        """The live actor of `key`, if any."""
        return self._actors.get(key)

    def busy(self, key: SessionKey) -> bool:
        """Whether `key` has a work item running or queued."""
        actor = self._actors.get(key)
        return actor is not None and actor.busy

    async def submit(self, key: SessionKey, work: Callable[[], Awaitable[T]]) -> T:
        """Run `work` on the actor of `key`, after everything submitted for it before."""
        if not self.running:
            raise SessionActorsStopped()
        actor = self._actors.get(key) or self._spawn(key)
        result: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        await actor.enqueue(_WorkItem(work, result))
        return await result

    def cancel_running(self, key: SessionKey) -> bool:
        """Cancel the work item running for `key`; False if none runs."""
        actor = self._actors.get(key)
        if actor is None or actor.running is None or actor.running.task is None:
            return False
        return actor.running.task.cancel()

    async def stop(self, grace_s: float | None = None) -> None:
        """Reject queued items; running ones get `grace_s` to finish, then are cancelled."""
        if self._state in ("new", "stopped"):
            self._state = "stopped"
            return
        self._state = "stopping"
        actors = list(self._actors.values())
        for actor in actors:
            actor.shut()
        tasks = [actor.task for actor in actors if actor.task is not None]
        grace = self.shutdown_grace_s if grace_s is None else grace_s
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace)
            if late:
                log.warning(
                    "cancelling session work still running after the grace", count=len(late)
                )
                work = [a.running.task for a in actors if a.running and a.running.task]
                for task in late:
                    task.cancel()
                await asyncio.wait([*late, *work])
        self._actors.clear()
        self._state = "stopped"

    def _spawn(self, key: SessionKey) -> SessionActor:
        actor = SessionActor(key, self, self.max_pending)
        self._actors[key] = actor
        actor.task = self._start_task(actor.run(), f"session-actor:{key}")
        return actor

    def _start_task(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        assert self._group is not None
        return self._group.create_task(work, name=name)

    def _retire(self, actor: SessionActor) -> None:
        if self._actors.get(actor.key) is actor:
            del self._actors[actor.key]
