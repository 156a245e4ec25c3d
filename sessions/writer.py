"""The disk writer: one thread that appends every session line, group-committing fsyncs.

Appends are queued from the event loop (handed to the thread once per loop iteration, `Handover`,
below) and resolved back on it, so file I/O never blocks the loop. An append written behind a log
(`append_behind`) has no future at all: only a refused write is reported back, to the callback it
came with. Under the `batch` policy the thread takes everything queued at once, writes it, fsyncs
each file it touched once, and only then resolves the waiters: appends that arrive while an fsync
runs share the next one (group commit), with no timer to add latency when the disk is idle.
`always` fsyncs after every append; `never` leaves flushing to the kernel (a process crash loses
nothing, a power cut may). When a batch touches several files, their writes and fsyncs run on a
small pool of threads at once: the file system commits concurrent fsyncs together, and one
session's slow disk flush does not queue every other session behind it.

Commands reach a writer thread through `Handover`, once per loop iteration, because a writer thread
woken per command costs the loop a queue put and a GIL hand-off for each: three journal records and
a session line a turn, every turn. Commands put here during one iteration of the loop are gathered
and handed over together at the next, so the thread wakes once for everything the loop did in
between, and the order of commands is kept. Nothing waits on a timer: the hand-over is the next
callback the loop runs, or `extra_iterations` later. The journal asks for two: in the iteration
after a message's record was put the dispatcher takes the record from the bus and routes it (its
lane's task is scheduled), in the next the turn runs, and an agent that answers at once puts the
turn's outcome there too, so the message and its answer share one write and one fdatasync instead
of waiting for two in turn. A slow agent's outcome comes later whatever the hand-over does; the
cost to it is two iterations.
"""

from __future__ import annotations

import asyncio
import errno
import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Generic, Literal, TypeVar

import structlog

from sessions.creator import HELPER_FROM_FILES, CreatorGone, FileCreator, open_made
from sessions.durable import sync_data, write_all
from sessions.errors import SessionWriteError

Command = TypeVar("Command")


class Handover(Generic[Command]):
    def __init__(
        self,
        on_hand_over: Callable[[], None] | None = None,
        *,
        extra_iterations: int = 0,
    ) -> None:
        """`on_hand_over` runs on the loop just before a gathering is handed over: after it,
        nothing put before may change (the thread may be reading it). `extra_iterations`: how
        many iterations of callbacks made ready by this one may still join its gathering."""
        self._queue: queue.SimpleQueue[list[Command]] = queue.SimpleQueue()
        self._gathering: list[Command] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_hand_over = on_hand_over
        self._extra_iterations = extra_iterations

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop `put` is called on (the writer's `start` or `open`)."""
        self._loop = loop

    # On the loop

    def put(self, command: Command) -> None:
        gathering = self._gathering
        if gathering is None:
            if self._loop is None:
                raise RuntimeError("the writer is not running")
            gathering = self._gathering = []
            self._loop.call_soon(self._hand_over, self._extra_iterations)
        gathering.append(command)

    def _hand_over(self, iterations_left: int) -> None:
        if iterations_left > 0:
            assert self._loop is not None
            self._loop.call_soon(self._hand_over, iterations_left - 1)
            return
        if self._on_hand_over is not None:
            self._on_hand_over()
        gathering, self._gathering = self._gathering, None
        if gathering:
            self._queue.put(gathering)

    # On the writer thread

    def take(self) -> list[Command]:
        """Everything handed over so far, in order; blocks until there is something."""
        commands = self._queue.get()
        while True:
            try:
                commands.extend(self._queue.get_nowait())
            except queue.Empty:
                return commands


log = structlog.get_logger(__name__)

FsyncPolicy = Literal["always", "batch", "never"]
FSYNC_POLICIES: tuple[FsyncPolicy, ...] = ("always", "batch", "never")


class AppendTarget:
    """A session file open for appending; only the writer thread touches `fd` once queued.

    A file still to be created has no descriptor yet (`fd` -1) but an `opener`, which the
    writer thread calls before the first write to create the file, empty: a new chat costs
    the event loop no trip to a thread of its own. Its `header` (the meta line) goes out with
    the first append, in the same write: a new chat's file costs the writer thread as few
    system calls as can make it, and each of them waits for the interpreter's lock on its way
    back while the event loop is busy."""

    __slots__ = ("broken", "fd", "header", "opener", "path")

    def __init__(
        self,
        path: Path,
        fd: int,
        opener: Callable[[], int] | None = None,
        header: bytes = b"",
    ) -> None:
        self.path = path
        self.fd = fd
        self.opener = opener
        self.header = header
        self.broken: SessionWriteError | None = None


Refused = Callable[[SessionWriteError], None]


@dataclass(slots=True)
class _Append:
    target: AppendTarget
    data: bytes
    #: None for an append written behind a log: `refused` hears of a failure instead.
    waiter: asyncio.Future[None] | None
    refused: Refused | None = None


@dataclass(slots=True)
class _Close:
    target: AppendTarget
    waiter: asyncio.Future[None]


@dataclass(slots=True)
class _Barrier:
    waiter: asyncio.Future[None]


_Command = _Append | _Close
_Outcome = tuple[_Append | _Close | _Barrier, SessionWriteError | None]


def _retrieve(future: asyncio.Future[None]) -> None:
    # A waiter whose caller went away must not log "exception was never retrieved".
    if not future.cancelled():
        future.exception()


class DiskWriter:
    def __init__(self, policy: FsyncPolicy, *, sync_threads: int = 8) -> None:
        if policy not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {policy!r}")
        self.policy: FsyncPolicy = policy
        self.sync_threads = sync_threads
        self._handover: Handover[_Command | _Barrier | None] = Handover()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Makes a burst of new files (`sessions.creator`); started with the first burst.
        self._creator: FileCreator | None = None
        self._creator_gone = False

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._handover.bind(self._loop)
        if self.policy != "never" and self.sync_threads > 1:
            self._pool = ThreadPoolExecutor(self.sync_threads, thread_name_prefix="session-sync")
        # daemon: a process that forgets to close its store must still be able to exit.
        self._thread = threading.Thread(target=self._run, name="session-writer", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Finish everything queued, then end the threads."""
        if self._thread is None:
            return
        self._handover.put(None)
        await asyncio.to_thread(self._thread.join)
        self._thread = None
        if self._pool is not None:
            await asyncio.to_thread(self._pool.shutdown)
            self._pool = None
        if self._creator is not None:
            await asyncio.to_thread(self._creator.close)
            self._creator = None

    def append(self, target: AppendTarget, data: bytes) -> asyncio.Future[None]:
        """Queue `data`; the future resolves once it is written (and synced, per policy)."""
        waiter = self._new_waiter()
        self._handover.put(_Append(target, data, waiter))
        return waiter

    def append_behind(self, target: AppendTarget, data: bytes, refused: Refused) -> None:
        """Queue `data` with nothing to wait on; `refused` is called (on the loop) if the disk
        refuses it."""
        if self._thread is None:
            raise RuntimeError("the disk writer is not running")
        self._handover.put(_Append(target, data, None, refused))

    def close(self, target: AppendTarget) -> asyncio.Future[None]:
        """Close the file after everything queued for it before; resolves once closed."""
        waiter = self._new_waiter()
        self._handover.put(_Close(target, waiter))
        return waiter

    def barrier(self) -> asyncio.Future[None]:
        """Resolves once everything queued before it has been written."""
        waiter = self._new_waiter()
        self._handover.put(_Barrier(waiter))
        return waiter

    def _new_waiter(self) -> asyncio.Future[None]:
        if self._loop is None or self._thread is None:
            raise RuntimeError("the disk writer is not running")
        waiter = self._loop.create_future()
        waiter.add_done_callback(_retrieve)
        return waiter

    # Everything below runs on the writer thread.

    def _run(self) -> None:
        while True:
            batch: list[_Command] = []
            barriers: list[_Barrier] = []
            stopping = False
            for command in self._handover.take():
                if command is None:
                    stopping = True
                    break
                if isinstance(command, _Barrier):
                    barriers.append(command)
                else:
                    batch.append(command)
            if batch:
                self._commit_supervised(batch)
            if barriers:
                self._resolve([(barrier, None) for barrier in barriers])
            if stopping:
                return

    def _commit_supervised(self, batch: list[_Command]) -> None:
        try:
            self._commit(batch)
        except Exception as error:
            # The writer's supervision point: a bug must fail this batch's waiters, not leave
            # them (and every later append) waiting for a thread that died.
            log.exception("sessions.writer_batch_failed", commands=len(batch))
            cause = OSError(errno.EIO, f"session writer error: {error!r}")
            self._resolve(
                [(command, SessionWriteError(command.target.path, cause)) for command in batch]
            )

    def _commit(self, batch: list[_Command]) -> None:
        by_file: dict[AppendTarget, list[_Command]] = {}
        for command in batch:
            by_file.setdefault(command.target, []).append(command)
        made = self._make_new_files(by_file)
        left = [commands for commands in by_file.values() if commands]
        if self._pool is None or len(left) == 1:
            results = [self._commit_file(commands) for commands in left]
        else:
            results = list(self._pool.map(self._commit_file, left))
        self._resolve(made + [outcome for outcomes in results for outcome in outcomes])

    def _make_new_files(self, by_file: dict[AppendTarget, list[_Command]]) -> list[_Outcome]:
        """A burst of new files made by the helper (`sessions.creator`), each with its header
        and first append: their outcomes; those appends are taken out of `by_file`."""
        new: list[tuple[AppendTarget, _Append, list[_Command]]] = [
            (target, first, commands)
            for target, commands in by_file.items()
            if isinstance(first := commands[0], _Append)
            and target.fd < 0
            and target.opener is not None
            and target.header
            and target.broken is None
        ]
        if len(new) < HELPER_FROM_FILES or self._creator_gone:
            return []
        files = [(target.path, target.header + first.data) for target, first, _ in new]
        try:
            if self._creator is None:
                self._creator = FileCreator.started()
            made = self._creator.make(files)
        except CreatorGone as error:
            self._creator_gone = True
            log.error(
                "sessions.creator_gone",
                error=str(error),
                detail="new files are made by the writer thread from now on",
            )
            if self._creator is None:
                return []  # it never started: nothing was made, the writer makes them all
            self._creator.close()
            # Which of these it made is unknown: their appends failed (the journal keeps them).
            cause = OSError(errno.EIO, str(error))
            outcomes: list[_Outcome] = []
            for target, first, commands in new:
                commands.pop(0)
                target.broken = SessionWriteError(target.path, cause)
                outcomes.append((first, target.broken))
            return outcomes
        outcomes = []
        for (target, first, commands), result in zip(new, made, strict=True):
            commands.pop(0)
            # The file exists from now on: whatever comes next opens it, never creates it.
            target.opener = partial(open_made, target.path)
            if result.error is None:
                target.header = b""
                outcomes.append((first, None))
                continue
            failure = SessionWriteError(target.path, result.error)
            if result.partial:
                target.broken = failure
                log.error("sessions.partial_line_left", path=str(target.path))
            outcomes.append((first, failure))
        return outcomes

    def _commit_file(self, commands: Sequence[_Command]) -> list[_Outcome]:
        """One file's share of a batch, in order: writes, its fsync(s), maybe its close."""
        target = commands[0].target
        outcomes: list[_Outcome] = []
        unsynced: list[int] = []
        for command in commands:
            if isinstance(command, _Close):
                self._sync_pending(target, unsynced, outcomes)
                unsynced = []
                outcomes.append((command, self._close(target)))
                continue
            error = self._write(target, command.data)
            if error is None and self.policy == "always":
                error = self._sync(target)
            outcomes.append((command, error))
            if error is None and self.policy == "batch":
                unsynced.append(len(outcomes) - 1)
        self._sync_pending(target, unsynced, outcomes)
        return outcomes

    def _write(self, target: AppendTarget, data: bytes) -> SessionWriteError | None:
        if target.broken is not None:
            return target.broken
        start = -1
        header = target.header
        try:
            if target.fd < 0 and target.opener is not None:
                target.fd = target.opener()
            if header:
                # Until its header is written the file is empty (created so, and a write
                # that failed is undone down to nothing): no need to ask where it ends.
                start = 0
                write_all(target.fd, header + data)
            else:
                start = os.lseek(target.fd, 0, os.SEEK_END)
                write_all(target.fd, data)
        except OSError as error:
            failure = SessionWriteError(target.path, error)
            self._undo_partial_write(target, start, failure)
            return failure
        if header:
            target.header = b""
        return None

    def _undo_partial_write(
        self, target: AppendTarget, start: int, failure: SessionWriteError
    ) -> None:
        # Half a line must not stay: the next append would be glued onto it.
        try:
            if start >= 0:
                os.ftruncate(target.fd, start)
                return
        except OSError as error:
            log.error("sessions.partial_write_not_undone", path=str(target.path), error=str(error))
        target.broken = failure
        log.error("sessions.partial_line_left", path=str(target.path))

    def _sync(self, target: AppendTarget) -> SessionWriteError | None:
        if target.fd < 0:
            return target.broken  # its opening failed: so did its writes
        try:
            sync_data(target.fd)
        except OSError as error:
            # After a failed fsync the kernel may have dropped the dirty pages: stop trusting
            # this descriptor; the store reopens (and re-checks) the file.
            target.broken = SessionWriteError(target.path, error)
            return target.broken
        return None

    def _sync_pending(
        self, target: AppendTarget, indexes: list[int], outcomes: list[_Outcome]
    ) -> None:
        if not indexes:
            return
        error = self._sync(target)
        if error is not None:
            for index in indexes:
                outcomes[index] = (outcomes[index][0], error)

    def _close(self, target: AppendTarget) -> SessionWriteError | None:
        if target.fd < 0:
            return None  # never opened: nothing was written to it
        try:
            os.close(target.fd)
        except OSError as error:
            return SessionWriteError(target.path, error)
        return None

    def _resolve(self, outcomes: list[_Outcome]) -> None:
        if not any(command.waiter is not None or error is not None for command, error in outcomes):
            return  # appends written behind a log, all written: nobody to tell
        loop = self._loop
        assert loop is not None
        try:
            loop.call_soon_threadsafe(_settle, outcomes)
        except RuntimeError:
            log.error("sessions.writes_unacknowledged_at_loop_close")


def _settle(outcomes: list[_Outcome]) -> None:
    for command, error in outcomes:
        waiter = command.waiter
        if waiter is None:
            if error is not None and isinstance(command, _Append) and command.refused is not None:
                command.refused(error)
            continue
        if waiter.done():
            continue
        if error is None:
            waiter.set_result(None)
        else:
            # One exception object per waiter: raising a shared one would pile up tracebacks.
            waiter.set_exception(SessionWriteError(error.path, error.cause))
