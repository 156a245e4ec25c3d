"""Whole-file operations on one session, blocking: the store runs each in a worker thread
while it holds that session's lock, with no append in flight and no descriptor open on it.

One of them is compaction (`compact_file`): before a session file passes its size cap, older
messages move to an archive beside it. The live file keeps its meta line, one system message
that names the archive (and how many messages it took), and the most recent messages, about
half the cap, so the next compaction is far away and appends stay O(1) amortised. The archive
is a whole JSONL session file (meta line first); an earlier summary moves into it too, so the
summaries chain every archive together. Nothing is deleted: a crash between writing the archive
and rewriting the live file leaves the old live file intact (the next compaction archives those
messages again, so an archive may repeat messages, but none is ever lost).
"""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import structlog

from bus import Message, MessageRole, SessionKey
from sessions.durable import atomic_write, fsync_dir, make_dirs, move_aside, write_all
from sessions.errors import EmptyRewriteRefused, SessionExists
from sessions.layout import SessionLayout, archive_numbers, archive_path, archived_path
from sessions.meta import SessionMeta
from sessions.recovery import SessionFile, check_tail, ensure_migrated, load_file
from sessions.session import Session

log = structlog.get_logger(__name__)

_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC


def open_for_append(
    layout: SessionLayout, key: SessionKey, initial: SessionMeta, *, durable: bool
) -> tuple[int, int]:
    """A descriptor positioned for appending, and the file's size; creates the file if needed.

    A new file gets its meta line (`initial`) before any message, made durable with its
    directory entry unless `durable` is false.
    """
    ensure_migrated(layout, key)
    path = layout.path_for(key)
    tail = check_tail(path, key, name_was_cut=layout.name_was_cut(key))
    if tail is not None:
        return os.open(path, _APPEND_FLAGS), tail.size
    make_dirs(path.parent, durable=durable)
    fd = os.open(path, _APPEND_FLAGS | os.O_CREAT, 0o644)
    try:
        line = initial.to_line()
        write_all(fd, line)
        if durable:
            os.fsync(fd)
            fsync_dir(path.parent)
    except BaseException:
        os.close(fd)
        raise
    return fd, len(line)


def create_session_file(path: Path) -> int:
    """A new, empty session file open for appending, and its chat's directories (on the
    writer thread, which writes the meta line with the first append).

    Only for a chat the store knows has no directory yet, so the directories are made without
    looking first; an existing file is refused, never appended to (its meta line would land in
    the middle). The new entries are made durable by the store's next sync."""
    sessions_dir = path.parent
    try:
        os.mkdir(sessions_dir.parent)
    except FileNotFoundError:  # the first chat of all: `users/` is new too
        make_dirs(sessions_dir, durable=False)
    except FileExistsError:  # made by someone else since the store listed them: fine
        with contextlib.suppress(FileExistsError):
            os.mkdir(sessions_dir)
    else:
        os.mkdir(sessions_dir)
    return os.open(path, _APPEND_FLAGS | os.O_CREAT | os.O_EXCL, 0o644)


def load_session(
    layout: SessionLayout, key: SessionKey, *, repair: bool = True
) -> SessionFile | None:
    """The session's file, repaired and migrated; read only (legacy file as is) without repair."""
    if repair:
        ensure_migrated(layout, key)
    path = layout.path_for(key)
    if repair or path.exists() or layout.migration_marker(key).exists():
        return load_file(path, key, name_was_cut=layout.name_was_cut(key), repair=repair)
    legacy = layout.legacy_path_for(key)
    return load_file(legacy, key, name_was_cut=layout.legacy_name_was_cut(key), repair=False)


def _has_messages(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            file.readline()
            return any(line.strip() for line in file)
    except FileNotFoundError:
        return False


def write_session(layout: SessionLayout, session: Session, *, create_only: bool) -> int:
    """Write the whole session atomically; returns its size in bytes.

    `create_only` refuses when the session exists already (fork). A rewrite never replaces a
    session that has messages with an empty one: that is what `archive_session` is for.
    """
    ensure_migrated(layout, session.key)
    path = layout.path_for(session.key)
    if create_only and path.exists() and path.stat().st_size > 0:
        raise SessionExists(str(session.key), path)
    if not session.messages and _has_messages(path):
        raise EmptyRewriteRefused(str(session.key), path)
    make_dirs(path.parent, durable=True)
    meta = session.meta.current_schema()
    lines = (message.to_line() for message in session.messages)
    return atomic_write(path, [meta.to_line(), *lines])


def archive_session(layout: SessionLayout, key: SessionKey) -> Path | None:
    """Move the live file aside under a timestamped name; None when there was none."""
    ensure_migrated(layout, key)
    path = layout.path_for(key)
    if not path.exists():
        return None
    while True:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        target = archived_path(path, stamp)
        try:
            move_aside(path, target)
        except FileExistsError:
            continue
        log.info("sessions.archived", key=str(key), archived_as=str(target))
        return target


def compact_session(
    layout: SessionLayout, key: SessionKey, *, keep_bytes: int, incoming_bytes: int
) -> bool:
    return compact_file(
        layout.path_for(key),
        key,
        keep_bytes=keep_bytes,
        incoming_bytes=incoming_bytes,
        name_was_cut=layout.name_was_cut(key),
    )


log = structlog.get_logger(__name__)

SUMMARY_PREFIX: Final = "[session compacted]"
# Room kept for the summary line, so the live file lands under its budget with it.
_SUMMARY_RESERVE = 512


def summary_message(moved: int, archive_name: str) -> Message:
    return Message.system(
        f"{SUMMARY_PREFIX} {moved} earlier messages were moved to {archive_name} "
        "beside this session file; older archives are named in its first lines."
    )


def is_compaction_summary(message: Message) -> bool:
    return message.role is MessageRole.SYSTEM and message.content.startswith(SUMMARY_PREFIX)


def compact_file(
    path: Path, key: SessionKey, *, keep_bytes: int, incoming_bytes: int, name_was_cut: bool
) -> bool:
    """Archive the older messages of `path`; False when there is nothing worth moving."""
    loaded = load_file(path, key, name_was_cut=name_was_cut)
    if loaded is None:
        return False
    meta_line = loaded.meta.touched().to_line()
    budget = keep_bytes - incoming_bytes - len(meta_line) - _SUMMARY_RESERVE
    keep_from = len(loaded.lines)
    kept_bytes = 0
    while keep_from and kept_bytes + len(loaded.lines[keep_from - 1]) + 1 <= budget:
        keep_from -= 1
        kept_bytes += len(loaded.lines[keep_from]) + 1
    moved = loaded.messages[:keep_from]
    if not moved or all(is_compaction_summary(message) for message in moved):
        return False
    numbers = archive_numbers(path)
    archive = archive_path(path, (numbers[-1] if numbers else 0) + 1)
    atomic_write(
        archive,
        [meta_line, *(raw + b"\n" for raw in loaded.lines[:keep_from])],
        replace=False,
    )
    moved_count = sum(not is_compaction_summary(message) for message in moved)
    summary = summary_message(moved_count, archive.name).to_line()
    size = atomic_write(
        path, [meta_line, summary, *(raw + b"\n" for raw in loaded.lines[keep_from:])]
    )
    log.info(
        "sessions.compacted",
        path=str(path),
        archived=moved_count,
        archive=archive.name,
        kept=len(loaded.lines) - keep_from,
        size=size,
    )
    return True
