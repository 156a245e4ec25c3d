"""What the channel keeps on disk: the last handled UID of the mailbox, and reply threads.

Both are small JSON files in the channel's data directory, replaced atomically by
`sessions.durable` and always written in a worker thread, never on the event loop. A torn
or unreadable file counts as absent: the channel then falls back to the unseen messages, and
the gateway's dedup by Message-ID keeps anything already handled from being answered twice.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

from channels.lifecycle.bounded import RecentMap
from sessions.durable import read_state_json, write_state_file

log = structlog.get_logger(__name__)

#: Threads remembered for replies; older ones are answered without the original subject.
MAX_THREADS = 2000


def _read_json(path: Path) -> Any:
    return read_state_json(path, unreadable_event="email.state_unreadable")


@dataclass(frozen=True, slots=True)
class UidMark:
    """Every message up to `last_uid` of the folder with this UIDVALIDITY has been handled."""

    uidvalidity: int
    last_uid: int


class UidStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    async def load(self) -> UidMark | None:
        data = await asyncio.to_thread(_read_json, self.path)
        if not isinstance(data, dict):
            return None
        validity, last = data.get("uidvalidity"), data.get("last_uid")
        if not isinstance(validity, int) or not isinstance(last, int):
            log.warning("email.state_unreadable", path=str(self.path), error="missing fields")
            return None
        return UidMark(validity, last)

    async def save(self, mark: UidMark) -> None:
        data = json.dumps(asdict(mark)).encode()
        await asyncio.to_thread(write_state_file, self.path, data)


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """What a reply to one received message needs to land in the sender's thread."""

    chat_id: str
    message_id: str
    subject: str
    references: tuple[str, ...]


class ThreadStore:
    """Received messages' threading headers by Message-ID, bounded, kept across restarts.

    A reply may be sent after a restart (the gateway answers what it received before a
    crash), so the subject and references of what it answers are on disk before the message
    is handed to the gateway.
    """

    def __init__(self, path: Path, max_entries: int = MAX_THREADS) -> None:
        self.path = path
        self._threads: RecentMap[str, ThreadInfo] = RecentMap(max_entries)
        self._loaded = False
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        async with self._lock:
            if self._loaded:
                return
            data = await asyncio.to_thread(_read_json, self.path)
            for item in data.get("threads", []) if isinstance(data, dict) else []:
                try:
                    info = ThreadInfo(
                        str(item["chat_id"]),
                        str(item["message_id"]),
                        str(item["subject"]),
                        tuple(str(ref) for ref in item["references"]),
                    )
                except (KeyError, TypeError) as exc:
                    log.warning("email.thread_entry_skipped", error=repr(exc))
                    continue
                self._threads[info.message_id] = info
            self._loaded = True

    def get(self, message_id: str) -> ThreadInfo | None:
        return self._threads.get(message_id)

    def latest(self, chat_id: str) -> ThreadInfo | None:
        """The most recent message received in the chat (for replies that name none)."""
        for info in reversed(self._threads.values()):
            if info.chat_id == chat_id:
                return info
        return None

    async def remember(self, info: ThreadInfo) -> None:
        await self.load()
        async with self._lock:
            self._threads.remember(info.message_id, info)
            items = [asdict(entry) for entry in self._threads.values()]
            payload = json.dumps({"threads": items}).encode()
            await asyncio.to_thread(write_state_file, self.path, payload)
