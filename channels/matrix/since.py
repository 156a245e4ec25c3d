"""The `/sync` position, kept durably: where the channel resumes after a restart.

The token is advanced only past events whose `inbound.send` returned (they are durable in the
gateway), so a crash between receiving and storing re-reads those events, and the gateway's
dedup by event id answers each once. Written atomically by `sessions.durable`, in a worker
thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from sessions.durable import read_state_json, write_state_json

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def since_path(data_dir: Path, user_id: str) -> Path:
    return data_dir / "matrix" / f"{_UNSAFE.sub('_', user_id).strip('._') or 'bot'}.since.json"


def _read(path: Path) -> str | None:
    data = read_state_json(path, unreadable_event="matrix.since_unreadable")
    token = data.get("next_batch") if isinstance(data, dict) else None
    return token if isinstance(token, str) and token else None


def _write(path: Path, token: str) -> None:
    write_state_json(path, {"next_batch": token})


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
