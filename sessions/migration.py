"""Moving a session from octos' legacy flat layout into the per-user layout, once.

Octos' state machine, with one change: the legacy file is renamed aside (`*.jsonl.migrated`)
instead of deleted, so no history is ever destroyed. A crash at any step is safe to resume:

    legacy only              -> copy into the per-user file, write the marker, move legacy aside
    per-user + legacy        -> an earlier run copied but did not finish: finish it
    marker present           -> done; a legacy file that reappeared is ignored
"""

from __future__ import annotations

import itertools
from pathlib import Path

import structlog

from bus import SessionKey
from sessions.fileops import atomic_write, make_dirs, move_aside
from sessions.layout import SessionLayout
from sessions.meta import CURRENT_SCHEMA_VERSION
from sessions.recovery import load_file

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
