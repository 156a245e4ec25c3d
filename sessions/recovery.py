"""Reading a session file the way a crash may have left it, and repairing it.

A line counts only if it ends with a newline and parses. What follows the last good line (a
half-written line, or lines that do not parse at the very end) is a torn tail: it is copied to
`{file}.torn` and cut off, so the next append starts on a clean line. A line that does not parse
in the middle is copied to `{file}.corrupt` with its line number, logged, and left out of a
rewritten file; the rest loads. Blocking code: call it from a worker thread.

It also moves a session from octos' legacy flat layout into the per-user layout, once
(`ensure_migrated`). Octos' state machine, with one change: the legacy file is renamed aside
(`*.jsonl.migrated`) instead of deleted, so no history is ever destroyed. A crash at any step
is safe to resume:

    legacy only              -> copy into the per-user file, write the marker, move legacy aside
    per-user + legacy        -> an earlier run copied but did not finish: finish it
    marker present           -> done; a legacy file that reappeared is ignored
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import structlog
from pydantic import ValidationError

from bus import Message, SessionKey
from sessions.durable import append_side_file, atomic_write, make_dirs, move_aside
from sessions.errors import SessionKeyCollision
from sessions.layout import SessionLayout, corrupt_path, torn_path
from sessions.meta import CURRENT_SCHEMA_VERSION, SessionMeta, read_meta_line

log = structlog.get_logger(__name__)

_TAIL_WINDOW = 64 * 1024


@dataclass(frozen=True, slots=True)
class Line:
    number: int  # 1-based, as an editor shows it
    raw: bytes  # without its newline


@dataclass(slots=True)
class SessionFile:
    """A session file as loaded (after any repair): its meta and its good message lines."""

    meta: SessionMeta
    messages: list[Message]
    lines: list[bytes]
    size: int


@dataclass(slots=True)
class _Scan:
    meta: SessionMeta | None
    messages: list[Message] = field(default_factory=list)
    lines: list[bytes] = field(default_factory=list)
    corrupt: list[Line] = field(default_factory=list)
    torn_offset: int | None = None


def parse_message(raw: bytes) -> Message | None:
    try:
        return Message.model_validate_json(raw)
    except ValidationError:
        return None


def _scan(data: bytes, path: Path) -> _Scan:
    raws = data.split(b"\n")
    rest = raws.pop()  # what follows the last newline: empty unless a write was cut short
    meta = read_meta_line(raws[0], path) if raws else None
    first = 0 if meta is None else 1
    parsed = [parse_message(raw) for raw in raws[first:]]
    scan = _Scan(meta=meta)
    # The torn tail: everything after the last line that parses.
    keep = len(parsed)
    while keep and parsed[keep - 1] is None:
        keep -= 1
    if keep < len(parsed) or rest:
        tail = sum(len(raw) + 1 for raw in raws[first + keep :]) + len(rest)
        scan.torn_offset = len(data) - tail
    for index, message in enumerate(parsed[:keep]):
        raw = raws[first + index]
        if message is not None:
            scan.messages.append(message)
            scan.lines.append(raw)
        elif raw.strip():
            scan.corrupt.append(Line(first + index + 1, raw))
    return scan


def check_key(meta: SessionMeta, key: SessionKey, path: Path, *, name_was_cut: bool) -> None:
    """A cut file name is shared by every key with the same prefix and hash: refuse strangers."""
    if name_was_cut and meta.session_key != str(key):
        raise SessionKeyCollision(path, str(key), meta.session_key)


def load_file(
    path: Path, key: SessionKey, *, name_was_cut: bool, repair: bool = True
) -> SessionFile | None:
    """Load and repair a session file; None when it does not exist or holds nothing valid.

    Without `repair` the file is only read: what a repair would move aside is left out.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    scan = _scan(data, path)
    if scan.meta is not None:
        check_key(scan.meta, key, path, name_was_cut=name_was_cut)
    size = len(data)
    if scan.torn_offset is not None and repair:
        _cut_torn_tail(path, data, scan.torn_offset)
        size = scan.torn_offset
    if scan.meta is None and not scan.messages:
        return None
    meta = scan.meta or SessionMeta.new(key)
    if (scan.corrupt or scan.meta is None) and repair:
        _quarantine(path, scan.corrupt)
        size = atomic_write(path, [meta.to_line(), *(raw + b"\n" for raw in scan.lines)])
    return SessionFile(meta, scan.messages, scan.lines, size)


def _cut_torn_tail(path: Path, data: bytes, offset: int) -> None:
    torn = data[offset:]
    append_side_file(torn_path(path), f"torn tail cut at byte {offset} of {path.name}", torn)
    with open(path, "r+b") as file:
        file.truncate(offset)
        os.fsync(file.fileno())
    log.warning(
        "sessions.torn_tail_cut",
        path=str(path),
        offset=offset,
        bytes=len(torn),
        moved_to=str(torn_path(path)),
    )


def _quarantine(path: Path, lines: list[Line]) -> None:
    for line in lines:
        append_side_file(corrupt_path(path), f"line {line.number} of {path.name}", line.raw)
    if lines:
        log.error(
            "sessions.unreadable_lines_quarantined",
            path=str(path),
            lines=[line.number for line in lines],
            moved_to=str(corrupt_path(path)),
        )


@dataclass(frozen=True, slots=True)
class Tail:
    """What an append needs of an existing file: whose it is and where it ends."""

    meta: SessionMeta
    size: int


def check_tail(path: Path, key: SessionKey, *, name_was_cut: bool) -> Tail | None:
    """Cheap check before appending: meta line and last line only; repairs via `load_file`.

    None when the file is missing or holds nothing valid (it is then empty or absent).
    """
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            first = _first_line(file)
            meta = read_meta_line(first, path) if first is not None else None
            healthy = meta is not None and _tail_is_clean(file, size, len(first or b"") + 1)
    except FileNotFoundError:
        return None
    if meta is not None:
        check_key(meta, key, path, name_was_cut=name_was_cut)
    if meta is not None and healthy:
        return Tail(meta, size)
    if size == 0:
        return None
    loaded = load_file(path, key, name_was_cut=name_was_cut)
    return None if loaded is None else Tail(loaded.meta, loaded.size)


def _first_line(file: BinaryIO) -> bytes | None:
    line = file.readline()
    return line[:-1] if line.endswith(b"\n") else None


def _tail_is_clean(file: BinaryIO, size: int, meta_end: int) -> bool:
    """Whether the file ends with a newline and its last line (if not the meta) parses."""
    if size == meta_end:
        return True
    window = _TAIL_WINDOW
    while True:
        start = max(meta_end, size - window)
        file.seek(start)
        chunk = file.read(size - start)
        if not chunk.endswith(b"\n"):
            return False
        previous = chunk.rfind(b"\n", 0, len(chunk) - 1)
        if previous >= 0 or start == meta_end:
            return parse_message(chunk[previous + 1 : -1]) is not None
        window *= 4


log = structlog.get_logger(__name__)

MARKER_CONTENT = b"migrated-from-flat\n"


def ensure_migrated(layout: SessionLayout, key: SessionKey) -> None:
    """Blocking; cheap (one stat) when there is no legacy file, which is the usual case."""
    legacy = layout.legacy_path_for(key)
    if not legacy.exists():
        return
    marker = layout.migration_marker(key)
    if marker.exists():
        return
    live = layout.path_for(key)
    if not live.exists():
        _copy_legacy(layout, key, legacy, live)
    make_dirs(marker.parent, durable=True)
    atomic_write(marker, [MARKER_CONTENT])
    aside = _move_legacy_aside(legacy)
    log.info(
        "sessions.legacy_layout_migrated",
        key=str(key),
        to=str(live),
        legacy_kept_as=str(aside),
    )


def _copy_legacy(layout: SessionLayout, key: SessionKey, legacy: Path, live: Path) -> None:
    loaded = load_file(legacy, key, name_was_cut=layout.legacy_name_was_cut(key))
    if loaded is None:
        return
    meta = loaded.meta.model_copy(
        update={
            "schema_version": CURRENT_SCHEMA_VERSION,
            "session_key": str(key),
            "topic": key.topic(),
        }
    )
    make_dirs(live.parent, durable=True)
    atomic_write(live, [meta.to_line(), *(raw + b"\n" for raw in loaded.lines)], replace=False)


def _move_legacy_aside(legacy: Path) -> Path:
    for attempt in itertools.count():
        suffix = ".migrated" if attempt == 0 else f".migrated.{attempt}"
        target = legacy.with_name(legacy.name + suffix)
        try:
            move_aside(legacy, target)
        except FileExistsError:
            continue
        return target
    raise AssertionError("unreachable")
