"""Small state files a channel keeps in its data directory (a poll position, a sync token).

Written whole and atomically (a temp file beside it, fsync, rename, fsync of the directory), so
a crash leaves the old content or the new, never half of each. The one owner of that recipe:
the Discord catch-up position, the Matrix sync token, the email UID mark and threads, the
pairing overlay and the journal's dedup file all go through it. Blocking: call through
`asyncio.to_thread`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


def write_state_file(path: Path, payload: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp: a name no other writer (thread or process) uses, created 0o600.
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


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
