"""What a session store is, and `SessionStore`, the one that keeps JSONL files.

`SessionStoreProtocol` is what the gateway needs of a session store, whatever keeps the data:
`SessionStore` (JSONL files) and `sessions.postgres.PostgresSessionStore` implement it;
`SessionManager`, the dispatcher, the chat commands, the API's history and the `sessions` CLI
use nothing else. `StoreBase` is what both stores share: `async with store:` is `open()`, then
`close()` on the way out; `rewrite` and `fork` are whole-session writes, which each store makes
atomic in its own way (`_write_whole`).

`SessionStore` keeps durable JSONL sessions, with O(1) appends that never block the event loop.
Each session file is touched by one operation at a time (a per-file lock), but an append holds the
lock only to queue its line: the disk writer thread writes and group-commits it, and many appends,
to one session or many, can wait for the same fsync. Order is kept: lines of one session reach the
file in the order `append` was called. Whole-file operations (load, rewrite, compaction, archive)
first close the session's descriptor through the writer, which also waits for every append queued
before, so they never race an append or write to a replaced file.

Open descriptors are bounded (`max_open_files`, least recently used closed first); a session
whose descriptor was closed costs no memory here and is reopened, with a cheap tail check, on
its next append.

The daemon's store (written behind its journal) knows which chats have a directory
(`ChatDirectories`): a first message loads nothing from disk, and its file is created by the
writer thread.

A store written behind a write-ahead log (`track_unsynced`) does not wait for its appends: the
log is the durable copy, so `append_all` returns once the line is queued, and a write the disk
refused surfaces at the next `sync` (which the log calls before it drops anything), so the log
keeps what the file lacks and puts it back at the next start.

A store opened `read_only` (a CLI looking at the data of a running daemon) never writes: it
neither repairs nor migrates, and refuses every change.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

import structlog

from bus import Message, SessionKey
from sessions.concurrency import KeyedLocks, RunningOperations, to_completion
from sessions.durable import FileSystemSync, make_dirs, sync_files
from sessions.errors import SessionError, SessionStoreClosed, SessionWriteError
from sessions.layout import ChatDirectories, SessionLayout
from sessions.listing import list_sessions
from sessions.meta import SessionMeta, title_of
from sessions.operations import (
    archive_session,
    compact_session,
    create_session_file,
    load_session,
    open_for_append,
    write_session,
)
from sessions.session import Session, SessionInfo
from sessions.writer import AppendTarget, DiskWriter, FsyncPolicy


class StoreBase(ABC):
    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def load(self, key: SessionKey) -> Session | None: ...

    @abstractmethod
    async def _write_whole(self, session: Session, *, create_only: bool) -> None:
        """Store `session` in place of what the store holds for its key, atomically;
        `create_only` refuses (SessionExists) a key that has history already."""

    @abstractmethod
    async def append_all(
        self, key: SessionKey, messages: Sequence[Message], *, lines: bytes | None = None
    ) -> AppendReceipt:
        """Store messages in order, as one write; returns once they are stored.
        `lines`, where the caller has them already: `Message.lines_of(messages)`."""

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def append(self, key: SessionKey, message: Message) -> None:
        """Store one message; returns once it is stored (durable under the store's policy)."""
        await self.append_all(key, [message])

    async def rewrite(self, session: Session) -> None:
        """Replace the session's messages with `session`'s, atomically."""
        await self._write_whole(session, create_only=False)

    async def fork(self, parent: SessionKey, child: SessionKey, copy_messages: int) -> Session:
        """A new session `child` that records `parent` and starts with its last N messages."""
        session = Session.forked(child, parent, await self.load(parent), copy_messages)
        await self._write_whole(session, create_only=True)
        return session


log = structlog.get_logger(__name__)

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
MIN_MAX_FILE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class AppendReceipt:
    """What an append did besides appending: `compacted` means older messages were archived,
    so a cached copy of the session no longer matches its file."""

    compacted: bool = False


class _OpenFile:
    __slots__ = ("size", "target")

    def __init__(self, target: AppendTarget, size: int) -> None:
        self.target = target
        self.size = size  # what the file will hold once every queued append is written


class SessionStore(StoreBase):
    def __init__(
        self,
        root: Path,
        *,
        fsync: FsyncPolicy = "batch",
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_open_files: int = 256,
        read_only: bool = False,
        track_unsynced: bool = False,
    ) -> None:
        """`track_unsynced`: remember which files were appended to, so `sync` can make them
        durable later (a store written behind a write-ahead log, with `fsync="never"`)."""
        if max_file_bytes < MIN_MAX_FILE_BYTES:
            raise ValueError(f"max_file_bytes must be at least {MIN_MAX_FILE_BYTES}")
        if max_open_files < 1:
            raise ValueError("max_open_files must be at least 1")
        self.root = root
        self.fsync: FsyncPolicy = fsync
        self.max_file_bytes = max_file_bytes
        self.max_open_files = max_open_files
        self.read_only = read_only
        self._layout = SessionLayout(root)
        self._writer = DiskWriter(fsync)
        self._locks: KeyedLocks[Path] = KeyedLocks()
        self._open: OrderedDict[Path, _OpenFile] = OrderedDict()
        self._closing: dict[Path, asyncio.Future[None]] = {}
        self._running = False
        #: Files appended to since the last `sync` (whose data may be only in the page cache).
        self._dirty: set[Path] = set()
        self._track_unsynced = track_unsynced
        #: What syncs many files at once, where the file system allows it.
        self._file_system: FileSystemSync | None = None
        #: The chats with a directory, when the store owns its directory (the daemon's).
        self._chats: ChatDirectories | None = None
        #: The first write-behind append the disk refused. Sticky: which turns it lost is not
        #: known here, so no later `sync` may let the log drop anything until a restart
        #: replays the log into the files.
        self._unsaved: SessionWriteError | None = None
        self._operations = RunningOperations()

    # Lifecycle

    async def open(self) -> None:
        if not self.read_only:
            await asyncio.to_thread(make_dirs, self.root, durable=self.fsync != "never")
            if self._track_unsynced:
                self._chats = await asyncio.to_thread(ChatDirectories.listed, self._layout)
                self._file_system = await asyncio.to_thread(FileSystemSync.opened, self.root)
            self._writer.start()
        self._running = True

    async def close(self) -> None:
        """Refuse new work, finish what runs, close every file, stop the writer."""
        if not self._running:
            return
        self._running = False
        await self._operations.idle()
        closes = [self._writer.close(entry.target) for entry in self._open.values()]
        self._open.clear()
        closes.extend(self._closing.values())
        if closes:
            await asyncio.wait(closes)
        if not self.read_only:
            await self._writer.stop()
        if self._file_system is not None:
            self._file_system.close()
            self._file_system = None

    # Public operations

    def path_for(self, key: SessionKey) -> Path:
        return self._layout.path_for(key)

    @property
    def open_file_count(self) -> int:
        return len(self._open)

    async def append_all(
        self, key: SessionKey, messages: Sequence[Message], *, lines: bytes | None = None
    ) -> AppendReceipt:
        """Store messages in order, as one write; returns once they are durable (written
        behind a log: once queued, see the module's docstring).
        `lines`, where the caller has them already: `Message.lines_of(messages)`.
        """
        if not messages:
            return AppendReceipt()
        data = Message.lines_of(messages) if lines is None else lines
        path = self._layout.path_for(key)
        self._check_usable(writes=True)
        if self._track_unsynced and (
            (entry := self._free_open_file(path, len(data)))
            or (entry := self._free_new_chat_file(key, path, messages[0], len(data)))
        ):
            # What the locked path below does for an open file or a new chat's, done without
            # the lock: no one holds or awaits it, and nothing here awaits, so no one can come
            # between. Nor is it counted as a running operation: `close` waits for those, and
            # could only look once this one is done.
            self._open.move_to_end(path)
            self._queue_behind(entry, path, data)
            return AppendReceipt()
        with self._operations:
            async with self._locks.hold(path):
                entry = await self._entry_for_append(key, path, messages[0])
                compacted = False
                if entry.size + len(data) > self.max_file_bytes:
                    compacted = await self._compact(key, path, len(data))
                    entry = await self._entry_for_append(key, path, messages[0])
                if self._track_unsynced:
                    self._queue_behind(entry, path, data)
                    return AppendReceipt(compacted=compacted)
                entry.size += len(data)
                waiter = self._writer.append(entry.target, data)
            try:
                # Shielded: a cancelled caller must not hide a write that is still queued.
                await asyncio.shield(waiter)
            except SessionWriteError:
                entry.size -= len(data)
                raise
        return AppendReceipt(compacted=compacted)

    async def sync(self) -> None:
        """Every append made so far is on disk and synced, whatever the fsync policy; raises
        `SessionWriteError` if one of them could not be written since the last sync.

        The write-ahead log calls this before it drops the records these appends came from:
        until then the log is the durable copy, so the appends themselves need not wait.
        """
        if self.read_only or not self._running:
            return
        paths, self._dirty = self._dirty, set()
        await self._writer.barrier()
        # Every append queued before the barrier has reported by now (the writer is FIFO).
        if self._unsaved is not None:
            self._dirty |= paths
            raise self._unsaved
        new_chats = self._chats.take_new() if self._chats is not None else set()
        if paths:
            syncing = partial(
                sync_files, paths, new_directories=new_chats, file_system=self._file_system
            )
            try:
                # Counted as running, so `close` keeps the file system's descriptor open for it.
                with self._operations:
                    await to_completion(syncing)
            except BaseException:
                self._dirty |= paths
                if self._chats is not None:
                    self._chats.keep_new(new_chats)
                raise

    def _free_open_file(self, path: Path, size: int) -> _OpenFile | None:
        """`path`'s open file if `size` more bytes can be appended to it at once: no one holds
        or waits for its lock, it is healthy and the append needs no compaction."""
        entry = self._open.get(path)
        if (
            entry is None
            or entry.target.broken is not None
            or self._locks.in_use(path)
            or entry.size + size > self.max_file_bytes
        ):
            return None
        return entry

    def _free_new_chat_file(
        self, key: SessionKey, path: Path, first: Message, size: int
    ) -> _OpenFile | None:
        """A file for `path` made now if its chat has no directory yet (the writer thread
        creates it before the first append), no one holds or waits for its lock and the
        append needs no compaction; None otherwise."""
        chats = self._chats
        if chats is None or chats.has(path) or self._locks.in_use(path):
            return None
        line = SessionMeta.new(key, title=title_of(first)).to_line()
        if len(line) + size > self.max_file_bytes:
            return None
        chats.add_new(path)
        return self._new_chat_target(path, line)

    def _new_chat_target(self, path: Path, meta_line: bytes) -> _OpenFile:
        target = AppendTarget(path, -1, opener=partial(create_session_file, path), header=meta_line)
        return self._register_target(path, target, len(meta_line))

    def _queue_behind(self, entry: _OpenFile, path: Path, data: bytes) -> None:
        """Hand `data` to the writer with nothing to wait on (the journal holds it)."""
        entry.size += len(data)
        self._dirty.add(path)
        refused = partial(self._written_behind, entry, len(data))
        self._writer.append_behind(entry.target, data, refused)

    def _written_behind(self, entry: _OpenFile, size: int, error: SessionWriteError) -> None:
        entry.size -= size
        log.error(
            "sessions.write_behind_failed",
            path=str(entry.target.path),
            error=str(error),
            detail="the journal keeps these turns; restart once the disk takes writes again",
        )
        if self._unsaved is None:
            self._unsaved = error

    async def load(self, key: SessionKey) -> Session | None:
        """The session as on disk (repairing a torn or corrupt file), None if there is none."""
        path = self._layout.path_for(key)
        if self._chats is not None and not self._chats.has(path):
            # A chat that never talked: nothing on disk to look for, nothing awaited (so, as
            # the fast append, not counted as a running operation).
            self._check_usable()
            return None
        with self._operation():
            async with self._locks.hold(path):
                await self._quiesce(path)
                loading = partial(load_session, self._layout, key, repair=not self.read_only)
                loaded = await to_completion(loading)
        return None if loaded is None else Session(key, loaded.meta, loaded.messages)

    async def archive(self, key: SessionKey) -> Path | None:
        """Move the session's file aside (history is kept); returns where it went."""
        path = self._layout.path_for(key)
        with self._operation(writes=True):
            async with self._locks.hold(path):
                await self._quiesce(path)
                return await to_completion(partial(archive_session, self._layout, key))

    async def list(self, base_key: str | None = None) -> list[SessionInfo]:
        """Every session on disk (of one chat if `base_key` is given), without loading them."""
        with self._operation():
            return await asyncio.to_thread(list_sessions, self._layout, base_key)

    def release(self, key: SessionKey) -> None:
        """Close the session's file soon (after its queued appends); no I/O on the caller."""
        path = self._layout.path_for(key)
        if path in self._open and not self._locks.in_use(path):
            self._close_later(path)

    # Internals

    def _on_disk(self, path: Path) -> None:
        """`path`'s chat has (or is about to have) its directory: loads must look on disk."""
        if self._chats is not None:
            self._chats.add(path)

    def _operation(self, *, writes: bool = False) -> RunningOperations:
        self._check_usable(writes=writes)
        return self._operations

    def _check_usable(self, *, writes: bool = False) -> None:
        if not self._running:
            raise SessionStoreClosed()
        if writes and self.read_only:
            raise SessionError(f"the session store at {self.root} was opened read-only")

    async def _write_whole(self, session: Session, *, create_only: bool) -> None:
        """Replace the file atomically: temp file, fsync, rename, fsync the directory."""
        path = self._layout.path_for(session.key)
        with self._operation(writes=True):
            async with self._locks.hold(path):
                await self._quiesce(path)
                self._on_disk(path)
                await to_completion(
                    partial(write_session, self._layout, session, create_only=create_only)
                )

    async def _entry_for_append(self, key: SessionKey, path: Path, first: Message) -> _OpenFile:
        entry = self._open.get(path)
        if entry is not None and entry.target.broken is None:
            self._open.move_to_end(path)
            return entry
        await self._quiesce(path)
        initial = SessionMeta.new(key, title=title_of(first))
        if self._chats is not None and self._chats.add_new(path):
            # A new chat: its file is created by the writer thread, before this first append.
            return self._new_chat_target(path, initial.to_line())
        self._on_disk(path)
        opening = partial(
            open_for_append, self._layout, key, initial, durable=self.fsync != "never"
        )
        # Registered even if our caller is cancelled meanwhile: the descriptor must be owned.
        fd, size = await to_completion(opening, partial(self._register, path))
        return self._register(path, (fd, size))

    def _register(self, path: Path, opened: tuple[int, int]) -> _OpenFile:
        fd, size = opened
        return self._register_target(path, AppendTarget(path, fd), size)

    def _register_target(self, path: Path, target: AppendTarget, size: int) -> _OpenFile:
        entry = _OpenFile(target, size)
        self._open[path] = entry
        self._close_idle_files()
        return entry

    async def _compact(self, key: SessionKey, path: Path, incoming_bytes: int) -> bool:
        await self._quiesce(path)
        compacted = await to_completion(
            partial(
                compact_session,
                self._layout,
                key,
                keep_bytes=self.max_file_bytes // 2,
                incoming_bytes=incoming_bytes,
            )
        )
        if not compacted:
            log.warning(
                "sessions.over_cap_nothing_to_archive",
                detail="the session file passes its size cap with nothing older to archive",
                key=str(key),
                max_file_bytes=self.max_file_bytes,
            )
        return compacted

    async def _quiesce(self, path: Path) -> None:
        """Close the descriptor of `path` once its queued appends are done (caller holds lock)."""
        entry = self._open.pop(path, None)
        if entry is not None:
            self._close_later(path, entry)
        closing = self._closing.get(path)
        if closing is not None:
            await asyncio.wait([closing])

    def _close_later(self, path: Path, entry: _OpenFile | None = None) -> None:
        entry = entry or self._open.pop(path)
        closing = self._writer.close(entry.target)
        self._closing[path] = closing

        def forget(done: asyncio.Future[None]) -> None:
            if self._closing.get(path) is done:
                del self._closing[path]

        closing.add_done_callback(forget)

    def _close_idle_files(self) -> None:
        excess = len(self._open) - self.max_open_files
        if excess <= 0:
            return
        # `_open` runs from least to most recently used: the first idle ones are the ones to go,
        # and the scan stops as soon as enough are found.
        idle = list(islice((path for path in self._open if not self._locks.in_use(path)), excess))
        for path in idle:
            self._close_later(path)


class SessionStoreProtocol(Protocol):
    @property
    def read_only(self) -> bool:
        """A store opened read-only refuses every change (a CLI reading a running daemon's)."""
        ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    async def append(self, key: SessionKey, message: Message) -> None: ...

    async def append_all(
        self, key: SessionKey, messages: Sequence[Message], *, lines: bytes | None = None
    ) -> AppendReceipt:
        """Store messages in order, as one write; returns once they are stored.
        `lines`, where the caller has them already: `Message.lines_of(messages)`.
        """
        ...

    async def sync(self) -> None:
        """Every append made so far is durable (the journal calls it before cutting its log)."""
        ...

    async def load(self, key: SessionKey) -> Session | None: ...

    async def rewrite(self, session: Session) -> None:
        """Replace the session's messages with `session`'s, atomically."""
        ...

    async def fork(self, parent: SessionKey, child: SessionKey, copy_messages: int) -> Session:
        """A new session `child` recording `parent`, starting with its last N messages."""
        ...

    async def archive(self, key: SessionKey) -> Path | str | None:
        """Set the session aside (history is kept); where it went, None if there was none."""
        ...

    async def list(self, base_key: str | None = None) -> list[SessionInfo]: ...

    def release(self, key: SessionKey) -> None:
        """The session left memory: free what is held for it (no I/O on the caller)."""
        ...
