"""Listing sessions from disk: per-user files, plus legacy files not yet migrated.

Reads each file's meta line and counts its lines; never parses messages. Blocking: run it in a
worker thread.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import structlog

from bus import SessionKey
from sessions.errors import UnsupportedSessionSchema
from sessions.layout import (
    SESSION_SUFFIX,
    SessionLayout,
    decode_component,
    is_cut_name,
    is_live_file_name,
    key_from_parts,
    topic_of_stem,
)
from sessions.meta import SessionMeta, read_meta_line
from sessions.session import SessionInfo

log = structlog.get_logger(__name__)

_CHUNK = 1024 * 1024


def list_sessions(layout: SessionLayout, base_key: str | None) -> list[SessionInfo]:
    infos: list[SessionInfo] = []
    if base_key is not None:
        user_dirs = [layout.user_dir(base_key)]
    elif layout.users_dir.is_dir():
        user_dirs = sorted(path for path in layout.users_dir.iterdir() if path.is_dir())
    else:
        user_dirs = []
    for user_dir in user_dirs:
        infos.extend(_user_sessions(user_dir))
    infos.extend(_legacy_sessions(layout, base_key))
    return infos


def _live_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(path for path in directory.iterdir() if is_live_file_name(path.name))


def _user_sessions(user_dir: Path) -> list[SessionInfo]:
    infos = []
    base = None if is_cut_name(user_dir.name) else decode_component(user_dir.name)
    for path in _live_files(user_dir / "sessions"):
        stem = path.name[: -len(SESSION_SUFFIX)]
        key = None
        if base is not None and not is_cut_name(stem):
            key = key_from_parts(base, topic_of_stem(stem))
        info = _info(path, key)
        if info is not None:
            infos.append(info)
    return infos


def _legacy_sessions(layout: SessionLayout, base_key: str | None) -> list[SessionInfo]:
    infos = []
    for path in _live_files(layout.legacy_dir):
        stem = path.name[: -len(SESSION_SUFFIX)]
        key = None
        if not is_cut_name(stem):
            try:
                key = SessionKey.parse(decode_component(stem))
            except ValueError:
                continue
        info = _info(path, key)
        if info is None or (base_key is not None and info.key.base_key() != base_key):
            continue
        if layout.path_for(info.key).exists() or layout.migration_marker(info.key).exists():
            continue
        infos.append(info)
    return infos


def _info(path: Path, key: SessionKey | None) -> SessionInfo | None:
    try:
        meta, line_count = _read_head_and_count(path)
        stat = path.stat()
    except FileNotFoundError:
        return None
    except UnsupportedSessionSchema as error:
        log.warning("sessions.newer_format_skipped", path=str(path), error=str(error))
        return None
    if key is None:
        if meta is None:
            log.warning("sessions.nameless_file_skipped", path=str(path))
            return None
        key = SessionKey.parse(meta.session_key)
    modified = datetime.fromtimestamp(stat.st_mtime, UTC)
    return SessionInfo(
        key=key,
        topic=key.topic(),
        message_count=line_count - (1 if meta is not None else 0),
        size=stat.st_size,
        # The meta line is written once; the file's mtime follows every append.
        updated_at=modified if meta is None else max(meta.updated_at, modified),
        path=path,
        title=None if meta is None else meta.title,
        parent_key=None if meta is None else meta.parent_key,
    )


def _read_head_and_count(path: Path) -> tuple[SessionMeta | None, int]:
    with open(path, "rb") as file:
        first = file.readline()
        if not first.endswith(b"\n"):
            return None, 0
        meta = read_meta_line(first[:-1], path)
        count = 1
        while chunk := file.read(_CHUNK):
            count += chunk.count(b"\n")
    return meta, count
