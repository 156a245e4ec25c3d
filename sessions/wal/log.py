"""`WriteAheadLog`: append-only segment files, one writer thread, one fdatasync per batch.

`append` queues a framed record and returns a future that resolves once the record is durable
under the fsync policy (records appended in one iteration of the event loop and the one after it
share one future and reach the writer together, `sessions.writer.Handover`): `batch` writes
everything queued at once and syncs once for all of it (group commit, no timer, so an idle disk
adds no latency), `always` syncs after each record, `never` leaves flushing to the kernel (a
killed process loses nothing, a power cut may).

`checkpoint(snapshot)` starts a new segment holding `snapshot` (records that restate all live
state), and once that segment is durable deletes the older ones: the log stays as small as what
is still unfinished. Opening the log replays every segment in order; a torn tail (the process
died mid-write) is cut off and kept in a `.torn` side file, a corrupt frame and what follows it
in its segment go to a `.corrupt` side file and are reported.

Record framing: `length (4 bytes, big-endian) | CRC-32 of the payload (4 bytes) | payload`. A
record counts only when its whole frame is there and its checksum matches. Scanning stops at
the first frame that is cut short (a torn tail: the process died mid-write, so nothing after it
was ever acknowledged) or whose checksum fails; what follows such a frame cannot be trusted to
be framed at all, so it is reported, never guessed at.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from sessions.durable import append_side_file, fsync_dir, make_dirs, sync_data, write_all
from sessions.writer import FSYNC_POLICIES, FsyncPolicy, Handover

_HEADER = struct.Struct(">II")
HEADER_BYTES = _HEADER.size
#: No single record is larger; a length past it is corruption, not a record.
MAX_RECORD_BYTES = 64 * 1024 * 1024


class FrameError(ValueError):
    """A record that cannot be framed (too large)."""


def encode_record(payload: bytes) -> bytes:
    if len(payload) > MAX_RECORD_BYTES:
        raise FrameError(f"a log record is {len(payload)} bytes; the limit is {MAX_RECORD_BYTES}")
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


Damage = Literal["none", "torn", "corrupt"]


@dataclass(frozen=True, slots=True)
class ScanResult:
    payloads: list[bytes]
    #: Bytes of `data` that hold whole, valid records; everything past it is damage.
    valid_bytes: int
    damage: Damage


def scan_records(data: bytes) -> ScanResult:
    """Every valid record from the start of `data`, and how the rest (if any) is damaged."""
    payloads: list[bytes] = []
    offset = 0
    end = len(data)
    view = memoryview(data)
    while offset < end:
        if end - offset < HEADER_BYTES:
            return ScanResult(payloads, offset, "torn")
        length, checksum = _HEADER.unpack_from(data, offset)
        if length > MAX_RECORD_BYTES:
            return ScanResult(payloads, offset, "corrupt")
        start = offset + HEADER_BYTES
        if end - start < length:
            return ScanResult(payloads, offset, "torn")
        payload = bytes(view[start : start + length])
        if zlib.crc32(payload) != checksum:
            # A frame that is all there but wrong at the very end of the file is a write the
            # disk never finished (torn); anywhere else it is corruption.
            damage: Damage = "torn" if start + length == end else "corrupt"
            return ScanResult(payloads, offset, damage)
        payloads.append(payload)
        offset = start + length
    return ScanResult(payloads, offset, "none")


log = structlog.get_logger(__name__)

SEGMENT_SUFFIX = ".wal"
#: The file an open log holds locked, with its process's pid written in it.
LOCK_FILE = "lock"


class LogWriteError(OSError):
    """The log could not be written; nothing queued after it is trusted either."""


#: Called on the loop once a record is durable (None) or could not be written (the error).
OnSettled = Callable[[LogWriteError | None], None]


class LogInUse(RuntimeError):
    """Another process has this log open: two writers would answer every message twice."""


# The log's writer commands, each with the future its caller awaits.
@dataclass(slots=True)
class _Append:
    #: Framed records, in order; the loop adds to them until the hand-over.
    records: list[bytes]
    waiter: asyncio.Future[None]
    #: Told how their records ended, before `waiter` resolves; the loop adds to them too.
    on_settled: list[OnSettled] = field(default_factory=list)


@dataclass(slots=True)
class _Rotate:
    #: Framed records, restating all live state.
    snapshot: list[bytes]
    waiter: asyncio.Future[None]


@dataclass(slots=True)
class _Stop:
    waiter: asyncio.Future[None]


_Command = _Append | _Rotate | _Stop


@dataclass(slots=True)
class _Segment:
    number: int
    path: Path
    fd: int = -1
    size: int = 0


@dataclass(slots=True)
class Replay:
    payloads: list[bytes] = field(default_factory=list)
    segments: list[_Segment] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def segment_path(directory: Path, number: int) -> Path:
    return directory / f"{number:012d}{SEGMENT_SUFFIX}"


def _segment_numbers(directory: Path) -> list[int]:
    numbers = []
    for path in directory.iterdir():
        if path.suffix == SEGMENT_SUFFIX and path.stem.isdigit():
            numbers.append(int(path.stem))
    return sorted(numbers)


def read_segments(directory: Path, *, repair: bool) -> Replay:
    """Every valid record of every segment, in order; with `repair`, damage is cut off."""
    replay = Replay()
    for number in _segment_numbers(directory):
        path = segment_path(directory, number)
        data = path.read_bytes()
        scanned = scan_records(data)
        replay.payloads.extend(scanned.payloads)
        if scanned.damage != "none":
            what = f"{path.name}: {scanned.damage} record at byte {scanned.valid_bytes}"
            replay.damaged.append(what)
            if repair:
                side = path.with_name(f"{path.name}.{scanned.damage}")
                append_side_file(side, what, data[scanned.valid_bytes :])
                with open(path, "r+b") as handle:
                    handle.truncate(scanned.valid_bytes)
                    os.fsync(handle.fileno())
        replay.segments.append(_Segment(number, path, size=scanned.valid_bytes))
    return replay


class WriteAheadLog:
    def __init__(self, directory: Path, *, fsync: FsyncPolicy = "batch") -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        self.directory = directory
        self.policy: FsyncPolicy = fsync
        self._handover: Handover[_Command] = Handover(on_hand_over=self._seal, extra_iterations=2)
        #: The append this loop iteration's records join, until it is handed over.
        self._pending: _Append | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._segments: list[_Segment] = []
        self._broken: LogWriteError | None = None
        self._lock_fd = -1
        #: Appended since the last checkpoint, counting what is queued (after `open`: all that
        #: was replayed); the checkpoint trigger reads these and the snapshot's size.
        self.appended_bytes = 0
        self.appended_records = 0
        #: What the last checkpoint's snapshot wrote.
        self.snapshot_bytes = 0
        self.snapshot_records = 0

    async def open(self) -> list[bytes]:
        """Replay the log (repairing a damaged tail) and start the writer; the payloads."""
        durable = self.policy != "never"
        await asyncio.to_thread(make_dirs, self.directory, durable=durable)
        self._lock_fd = await asyncio.to_thread(_lock, self.directory)
        replay = await asyncio.to_thread(read_segments, self.directory, repair=True)
        for damage in replay.damaged:
            log.error("wal.damaged_record_quarantined", damage=damage)
        self._segments = replay.segments
        if not self._segments:
            self._segments = [_Segment(1, segment_path(self.directory, 1))]
        last = self._segments[-1]
        last.fd = await asyncio.to_thread(self._open_segment, last.path)
        self.appended_bytes = sum(segment.size for segment in self._segments)
        self.appended_records = len(replay.payloads)
        self._loop = asyncio.get_running_loop()
        self._handover.bind(self._loop)
        self._thread = threading.Thread(target=self._run, name="wal-writer", daemon=True)
        self._thread.start()
        return replay.payloads

    def append(self, payload: bytes, on_settled: OnSettled | None = None) -> asyncio.Future[None]:
        """Queue one record; the future resolves once it is durable (raises LogWriteError).

        `on_settled` is called with how the record ended, just before the future resolves: a
        writer that must act on it whoever awaits (or stops awaiting) the future, at the cost of
        a call rather than one more callback of the loop's (`add_done_callback`).
        """
        data = encode_record(payload)
        if self._broken is not None:
            refused = self._new_waiter()
            error = LogWriteError(self._broken.errno, str(self._broken))
            refused.set_exception(error)
            if on_settled is not None:
                assert self._loop is not None
                self._loop.call_soon(on_settled, error)
            return refused
        self.appended_bytes += len(data)
        self.appended_records += 1
        pending = self._pending
        if pending is None:
            pending = self._pending = _Append([], self._new_waiter())
            self._handover.put(pending)
        pending.records.append(data)
        if on_settled is not None:
            pending.on_settled.append(on_settled)
        return pending.waiter

    def _seal(self) -> None:
        # Handed over: the writer thread may be reading it; later records start another.
        self._pending = None

    async def checkpoint(self, snapshot: list[bytes]) -> None:
        """A new segment that starts with `snapshot`; older segments go once it is durable.

        The caller builds `snapshot` from state that already reflects every record appended
        before this call, with no await in between.
        """
        waiter = self._new_waiter()
        framed = [encode_record(payload) for payload in snapshot]
        self.snapshot_bytes = sum(len(record) for record in framed)
        self.snapshot_records = len(framed)
        self.appended_bytes = self.appended_records = 0
        self._seal()  # records appended after this go to the new segment, after the snapshot
        self._handover.put(_Rotate(framed, waiter))
        await waiter

    async def close(self) -> None:
        """Write and sync everything queued, close the segment, stop the writer."""
        if self._thread is None:
            return
        waiter = self._new_waiter()
        self._seal()
        self._handover.put(_Stop(waiter))
        await asyncio.wait([waiter])
        await asyncio.to_thread(self._thread.join)
        self._thread = None
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = -1

    def _new_waiter(self) -> asyncio.Future[None]:
        if self._loop is None:
            raise RuntimeError("the write-ahead log is not open")
        waiter = self._loop.create_future()
        waiter.add_done_callback(_retrieve)
        return waiter

    # Everything below runs on the writer thread (and `_open_segment` in `open`).

    def _open_segment(self, path: Path) -> int:
        existed = path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        if not existed and self.policy != "never":
            fsync_dir(path.parent)
        return fd

    def _run(self) -> None:
        while not self._commit(self._handover.take()):
            pass

    def _commit(self, batch: list[_Command]) -> bool:
        """Run a batch in order; True once a stop was handled."""
        pending: list[_Append] = []
        for command in batch:
            if isinstance(command, _Append):
                pending.append(command)
                continue
            self._flush(pending)
            pending = []
            if isinstance(command, _Rotate):
                self._resolve([command.waiter], self._rotate(command.snapshot))
                continue
            self._close_current()
            self._resolve([command.waiter], None)
            return True
        self._flush(pending)
        return False

    def _flush(self, appends: list[_Append]) -> None:
        if not appends:
            return
        segment = self._segments[-1]
        error: LogWriteError | None = self._broken
        if error is None:
            try:
                if self.policy == "always":
                    for append in appends:
                        for record in append.records:
                            write_all(segment.fd, record)
                            sync_data(segment.fd)
                else:
                    write_all(segment.fd, b"".join(r for a in appends for r in a.records))
                    if self.policy == "batch":
                        sync_data(segment.fd)
            except OSError as exc:
                error = self._break(exc)
        told = [tell for append in appends for tell in append.on_settled]
        self._resolve([append.waiter for append in appends], error, told)

    def _rotate(self, snapshot: list[bytes]) -> LogWriteError | None:
        if self._broken is not None:
            return self._broken
        old = list(self._segments)
        number = old[-1].number + 1
        segment = _Segment(number, segment_path(self.directory, number))
        try:
            segment.fd = self._open_segment(segment.path)
            write_all(segment.fd, b"".join(snapshot))
            if self.policy != "never":
                sync_data(segment.fd)
            self._segments = [segment]
            for previous in old:
                if previous.fd >= 0:
                    os.close(previous.fd)
                previous.path.unlink(missing_ok=True)
            if self.policy != "never":
                fsync_dir(self.directory)
        except OSError as exc:
            return self._break(exc)
        return None

    def _close_current(self) -> None:
        for segment in self._segments:
            if segment.fd >= 0:
                try:
                    if self.policy != "never":
                        sync_data(segment.fd)
                    os.close(segment.fd)
                except OSError as exc:
                    self._break(exc)
                segment.fd = -1

    def _break(self, exc: OSError) -> LogWriteError:
        code = exc.errno if exc.errno is not None else errno.EIO
        self._broken = LogWriteError(code, f"write-ahead log {self.directory}: {exc}")
        log.error("wal.write_failed", directory=str(self.directory), error=str(exc))
        return self._broken

    def _resolve(
        self,
        waiters: list[asyncio.Future[None]],
        error: LogWriteError | None,
        told: list[OnSettled] | None = None,
    ) -> None:
        loop = self._loop
        assert loop is not None
        try:
            loop.call_soon_threadsafe(_settle, waiters, error, told or [])
        except RuntimeError:
            log.error("wal.loop_closed_before_ack", records=len(waiters))


def lock_pid(directory: Path) -> int | None:
    """The pid written in `directory`'s lock: the process that holds it (or held it last, when
    none does now); None when the log was never opened."""
    try:
        text = (directory / LOCK_FILE).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _lock(directory: Path) -> int:
    """Hold `directory/lock` for this process (the kernel lets go when the process dies)."""
    path = directory / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise LogInUse(
            f"the journal {directory} is in use by pid {holder}: another octos-gateway runs "
            "on this data directory; stop it, or give this one its own data_dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _settle(
    waiters: list[asyncio.Future[None]], error: LogWriteError | None, told: list[OnSettled]
) -> None:
    for tell in told:
        try:
            tell(None if error is None else LogWriteError(error.errno, str(error)))
        except Exception:
            # Supervision point: one writer's failing bookkeeping must not keep the others (nor
            # every waiter of the batch) from hearing that their records are durable.
            log.exception("wal.on_settled_failed")
    for waiter in waiters:
        if waiter.done():
            continue
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(LogWriteError(error.errno, str(error)))
