"""Blocking file primitives for worker threads: atomic replace, durable side files, dir fsync.

Nothing here may run on the event loop; the store calls these through `asyncio.to_thread`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

_temp_names = itertools.count()

#: fdatasync flushes the data and the size (all a reader needs) without other metadata.
sync_data = getattr(os, "fdatasync", os.fsync)


def fsync_dir(directory: Path) -> None:
    """Make renames and new entries in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_files(paths: Iterable[Path], *, new_directories: Iterable[Path] = ()) -> None:
    """fsync each file that still exists, and each of their directories once; for each of
    `new_directories` (users/{chat}, made without syncing), also it and the two above it, so
    the entries of a new chat's directories are durable too."""
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


def atomic_write(path: Path, chunks: Iterable[bytes], *, replace: bool = True) -> int:
    """Write a whole file durably: temp file beside it, fsync, rename, fsync the directory.

    With `replace=False` an existing file is never overwritten (FileExistsError). Returns the
    number of bytes written. A crash at any point leaves either the old file or the new one,
    plus at worst a hidden temp file.
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}-{next(_temp_names)}.tmp")
    size = 0
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
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
