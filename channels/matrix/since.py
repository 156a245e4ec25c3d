"""The `/sync` position, kept durably: where the channel resumes after a restart.

The token is advanced only past events whose `inbound.send` returned (they are durable in the
gateway), so a crash between receiving and storing re-reads those events, and the gateway's
dedup by event id answers each once. Written atomically (a temporary file in the same directory,
fsynced, `os.replace`d, the directory fsynced), in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def since_path(data_dir: Path, user_id: str) -> Path:
    return data_dir / "matrix" / f"{_UNSAFE.sub('_', user_id).strip('._') or 'bot'}.since.json"


def _read(path: Path) -> str | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        log.warning("matrix.since_unreadable", path=str(path), error=str(error))
        return None
    token = data.get("next_batch") if isinstance(data, dict) else None
    return token if isinstance(token, str) and token else None


def _write(path: Path, token: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as out:
        json.dump({"next_batch": token}, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class SinceStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._saved: str | None = None

    async def load(self) -> str | None:
        self._saved = await asyncio.to_thread(_read, self.path)
        return self._saved

    async def save(self, token: str) -> None:
        if token == self._saved:
            return
        # Shielded: a cancellation mid-write must not leave the token behind the events.
        await asyncio.shield(asyncio.to_thread(_write, self.path, token))
        self._saved = token
