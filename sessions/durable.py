"""Durable files, the one recipe: a file written whole and atomically (a temp file beside it,
fsync, rename, fsync of the directory), so a crash leaves the old content or the new, never
half of each; durable side files, new directories and directory syncs.

Every whole-file write of the project goes through `atomic_write`: session files, the topics
file, the journal's dedup file, reply dead letters and the small state files a channel keeps in
its data directory (`write_state_file`: the Discord catch-up position, the Matrix sync token,
the email UID mark and threads, the QQ session, the pairing overlay), which are private to the
profile (mode 0600).

Blocking: nothing here may run on the event loop; callers go through `asyncio.to_thread`.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

_temp_names = itertools.count()

#: A sync of more files and new chat directories than this asks for one `syncfs` of their
#: file system rather than an fsync of each file and directory. Each fsync costs a commit or
#: at least a flush of the disk's cache, and a new chat needs three (its file and its two new
#: directories): one `syncfs` commits them all at once.
SYNCFS_ABOVE = 64

#: File systems whose `syncfs` writes back and commits every file's data and every directory
#: entry, as an fsync of each would (ext4, XFS, btrfs). Elsewhere (FUSE, network file
#: systems) it may not, and files are synced one by one.
_SYNCFS_FILE_SYSTEMS = frozenset({0xEF53, 0x58465342, 0x9123683E})
#: Before Linux 5.8 `syncfs` returned 0 even when a write-back failed.
_SYNCFS_REPORTS_ERRORS_SINCE = (5, 8)

#: fdatasync flushes the data and the size (all a reader needs) without other metadata.
sync_data = getattr(os, "fdatasync", os.fsync)


def fsync_dir(directory: Path) -> None:
    """Make renames and new entries in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileSystemSync:
    """`syncfs` of the file system holding a directory, through a descriptor kept open from
    the start: the kernel reports to it every write-back error on that file system since it
    was opened."""

    def __init__(self, fd: int, syncfs: Callable[[int], int]) -> None:
        self._fd = fd
        self._syncfs = syncfs

    @classmethod
    def opened(cls, directory: Path) -> FileSystemSync | None:
        """One for `directory`'s file system, or None where `syncfs` cannot stand in for an
        fsync of each file (not Linux 5.8 or later, or a file system not known to commit
        everything on `syncfs`)."""
        if sys.platform != "linux" or _kernel_version() < _SYNCFS_REPORTS_ERRORS_SINCE:
            return None
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = getattr(libc, "syncfs", None)
        fstatfs = getattr(libc, "fstatfs", None)
        if syncfs is None or fstatfs is None:
            return None
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        # `struct statfs` starts with its `f_type`, a C long (Linux keeps that layout on
        # every 64-bit architecture; elsewhere an unknown type only means no `syncfs`).
        buffer = ctypes.create_string_buffer(512)
        if fstatfs(fd, buffer) != 0 or ctypes.c_long.from_buffer(buffer).value not in (
            _SYNCFS_FILE_SYSTEMS
        ):
            os.close(fd)
            return None
        return cls(fd, syncfs)

    def sync(self) -> None:
        """Write back and commit everything on the file system; OSError if a write-back
        failed since the last call (on any file of the file system, not only ours)."""
        if self._syncfs(self._fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    def close(self) -> None:
        os.close(self._fd)


def _kernel_version() -> tuple[int, int]:
    numbers = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return (int(numbers[1]), int(numbers[2])) if numbers else (0, 0)


def sync_files(
    paths: Iterable[Path],
    *,
    new_directories: Iterable[Path] = (),
    file_system: FileSystemSync | None = None,
) -> None:
    """fsync each file that still exists, and each of their directories once; for each of
    `new_directories` (users/{chat}, made without syncing), also it and the two above it, so
    the entries of a new chat's directories are durable too.

    With `file_system` (the one holding them all), more than SYNCFS_ABOVE files and new
    directories are synced with one `syncfs` instead. If that reports a failed write-back,
    which may be another program's, the files are synced one by one after all: each file's
    own fsync says whether the failure was its own.
    """
    paths = list(paths)
    new_directories = list(new_directories)
    if file_system is not None and len(paths) + len(new_directories) > SYNCFS_ABOVE:
        try:
            file_system.sync()
        except OSError as error:
            log.warning("sessions.syncfs_failed", error=str(error), files=len(paths))
        else:
            return
    directories: set[Path] = set()
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # archived or compacted away since: its replacement was written durably
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        directories.add(path.parent)
    for directory in new_directories:
        directories.update((directory, directory.parent, directory.parent.parent))
    for directory in directories:
        try:
            fsync_dir(directory)
        except FileNotFoundError:
            continue  # archived away since


def make_dirs(directory: Path, *, durable: bool) -> None:
    """Create `directory` and its missing parents, syncing each new entry into its parent."""
    missing: list[Path] = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:
            continue
        if durable:
            fsync_dir(path.parent)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def atomic_write(
    path: Path, chunks: Iterable[bytes], *, replace: bool = True, mode: int = 0o644
) -> int:
    """Write a whole file durably: temp file beside it, fsync, rename, fsync the directory.

    With `replace=False` an existing file is never overwritten (FileExistsError). Returns the
    number of bytes written. A crash at any point leaves either the old file or the new one,
    plus at worst a hidden temp file.
    """
    temp, fd = _new_temp_file(path, mode)
    size = 0
    try:
        try:
            for chunk in chunks:
                write_all(fd, chunk)
                size += len(chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(temp, path)
        else:
            _rename_no_replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return size


def _new_temp_file(path: Path, mode: int) -> tuple[Path, int]:
    """A hidden temp file beside `path` that no other writer (thread or process) uses, open for
    writing; a name left behind by a crashed process of the same pid is passed over."""
    while True:
        temp = path.with_name(f".{path.name}.{os.getpid()}-{next(_temp_names)}.tmp")
        try:
            return temp, os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        except FileExistsError:
            continue


def write_state_file(path: Path, payload: bytes) -> None:
    """Replace a channel's state file `path` with `payload` (`atomic_write`, private to the
    profile), creating its directory if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (payload,), mode=0o600)


def read_state_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def write_state_json(path: Path, data: object, *, indent: int | None = None) -> None:
    """`write_state_file` of `data` as JSON (keys sorted when indented, for people to read)."""
    text = json.dumps(data, indent=indent, sort_keys=indent is not None)
    write_state_file(path, text.encode("utf-8"))


def read_state_json(path: Path, *, unreadable_event: str) -> object | None:
    """The JSON in `path`, or None when it is absent or unreadable (then logged as the event).

    A torn or foreign file counts as absent: every caller has a safe fallback (start from
    the platform's unseen messages, and the gateway's durable dedup answers each once).
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        log.warning(unreadable_event, path=str(path), error=repr(error))
        return None
    try:
        data: object = json.loads(raw)
    except ValueError as error:
        log.warning(unreadable_event, path=str(path), error=repr(error))
        return None
    return data


def append_side_file(path: Path, header: str, raw: bytes) -> None:
    """Append a quarantined piece of a session file, with a header saying where it came from."""
    record = f"# {header} at {datetime.now(UTC).isoformat()}\n".encode() + raw + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, record)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


def move_aside(path: Path, target: Path) -> None:
    """Rename `path` to `target` (which must not exist) and make the rename durable."""
    _rename_no_replace(path, target)
    fsync_dir(path.parent)


def _rename_no_replace(source: Path, target: Path) -> None:
    # link() fails if the target exists, so no other file can ever be replaced by accident.
    try:
        os.link(source, target)
    except FileExistsError:
        raise
    except OSError:
        # A file system without hard links: check, then rename (no other writer races us here).
        if target.exists():
            raise FileExistsError(target) from None
        os.rename(source, target)
        return
    os.unlink(source)
