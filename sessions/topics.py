"""Topics of a chat: which named session is active, remembered across restarts.

`{root}/active_sessions.json` holds `{"active": {base_key: topic}, "previous": {base_key: topic}}`
as octos does; the default session is the absence of an active topic (and `""` where a
previous topic was the default one). Changes are made in memory; `save()` writes the file
atomically, off the event loop.
"""

from __future__ import annotations

import asyncio
import json
import unicodedata
from pathlib import Path
from typing import Final

import structlog

from sessions.errors import InvalidTopicName
from sessions.fileops import atomic_write, make_dirs

log = structlog.get_logger(__name__)

ACTIVE_TOPICS_FILE: Final = "active_sessions.json"
MAX_TOPIC_CHARS: Final = 50
_FORBIDDEN: Final = {"#": "'#'", ":": "':'", "/": "'/'"}
_DEFAULT_NAMES: Final = ("", "default")


def validate_topic_name(name: str) -> None:
    """Octos' rule for a topic a user names; raises ValueError (InvalidTopicName) saying why."""
    if not name.strip():
        raise InvalidTopicName("a session name cannot be empty")
    if len(name) > MAX_TOPIC_CHARS:
        raise InvalidTopicName(
            f"a session name has at most {MAX_TOPIC_CHARS} characters ({len(name)} given)"
        )
    for char, shown in _FORBIDDEN.items():
        if char in name:
            raise InvalidTopicName(f"a session name cannot contain {shown}")
    if any(unicodedata.category(char) == "Cc" for char in name):
        raise InvalidTopicName("a session name cannot contain control characters")
    if name.lower() == "default":
        raise InvalidTopicName("'default' is the name of the main session; choose another")


def _topic(stored: str) -> str | None:
    return None if stored.lower() in _DEFAULT_NAMES else stored


class ActiveTopics:
    def __init__(self, root: Path) -> None:
        self.path = root / ACTIVE_TOPICS_FILE
        self._active: dict[str, str] = {}
        self._previous: dict[str, str] = {}
        self._save_lock = asyncio.Lock()

    async def load(self) -> None:
        """Read the file; a missing one means every chat is on its default session."""
        data = await asyncio.to_thread(self._read)
        self._active = {
            base: topic for base, topic in data.get("active", {}).items() if _topic(topic)
        }
        self._previous = dict(data.get("previous", {}))

    async def save(self) -> None:
        async with self._save_lock:
            content = json.dumps(
                {"active": self._active, "previous": self._previous},
                ensure_ascii=False,
                indent=1,
                sort_keys=True,
            ).encode()
            await asyncio.to_thread(self._write, content + b"\n")

    def active(self, base_key: str) -> str | None:
        """The active topic of a chat; None is its default session."""
        return self._active.get(base_key)

    def previous(self, base_key: str) -> str | None:
        stored = self._previous.get(base_key)
        return None if stored is None else _topic(stored)

    def has_previous(self, base_key: str) -> bool:
        return base_key in self._previous

    def switch(self, base_key: str, topic: str | None) -> None:
        """Make `topic` active (None: the default session), remembering the one before."""
        current = self.active(base_key)
        if topic == current:
            return
        self._previous[base_key] = current or ""
        if topic is None:
            self._active.pop(base_key, None)
        else:
            self._active[base_key] = topic

    def back(self, base_key: str) -> str | None:
        """Switch to the previous topic and return it (the active one stays if there is none)."""
        if base_key not in self._previous:
            return self.active(base_key)
        self.switch(base_key, self.previous(base_key))
        return self.active(base_key)

    def forget(self, base_key: str, topic: str) -> None:
        """A deleted topic is neither active nor previous any more."""
        if self._active.get(base_key) == topic:
            self.switch(base_key, None)
        if self._previous.get(base_key) == topic:
            del self._previous[base_key]

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(raw)
            return {
                section: {str(k): str(v) for k, v in data.get(section, {}).items()}
                for section in ("active", "previous")
            }
        except (ValueError, AttributeError) as error:
            log.error(
                "sessions.active_topics_unreadable",
                detail="every chat starts on its default session",
                path=str(self.path),
                error=str(error),
            )
            return {}

    def _write(self, content: bytes) -> None:
        make_dirs(self.path.parent, durable=True)
        atomic_write(self.path, [content])
