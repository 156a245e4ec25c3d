"""Topics of a chat: which named session is active, remembered across restarts and processes.

`ActiveTopicsStore` is what the chat commands use; each change is one atomic step
(`ChatTopics`: the pure rule of `/s`, `/back`, `/delete`) and is stored before it returns.
Two backends implement it, chosen where the session store is (`sessions.backends`):

- `ActiveTopics`: `{root}/active_sessions.json` holds `{"active": {base_key: topic},
  "previous": {base_key: topic}}` as octos does (and `"agent": {base_key: name}` for the chats
  that chose one), written atomically off the event loop; one process owns it.
- `sessions.postgres.topics.PostgresActiveTopics`: a row per chat, so every worker of a
  cluster sees the topic another worker switched to.

The default session is the absence of an active topic (and `""` where a previous topic was the
default one).
"""

from __future__ import annotations

import asyncio
import json
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from sessions.durable import atomic_write, make_dirs
from sessions.errors import InvalidTopicName

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


@dataclass(frozen=True, slots=True)
class ChatTopics:
    """One chat's topics as stored: `active` None is the default session; `previous` None is
    "no previous topic", `""` the default session. `agent` is the agent the chat chose with
    `/agent` (None: the one its routes give), kept here because it is the chat's, whichever
    of its sessions is active."""

    active: str | None = None
    previous: str | None = None
    agent: str | None = None

    def switched(self, topic: str | None) -> ChatTopics:
        """`topic` active (None: the default session), the one before remembered."""
        if topic == self.active:
            return self
        return ChatTopics(topic, self.active or "", self.agent)

    def back(self) -> ChatTopics:
        """The previous topic active again; unchanged when there is none."""
        if self.previous is None:
            return self
        return self.switched(_topic(self.previous))

    def forgotten(self, topic: str) -> ChatTopics:
        """A deleted topic is neither active nor previous any more."""
        state = self.switched(None) if self.active == topic else self
        if state.previous == topic:
            state = ChatTopics(state.active, None, state.agent)
        return state

    def with_agent(self, agent: str | None) -> ChatTopics:
        """The chat answered by `agent` from now on (None: by the one its routes give)."""
        return ChatTopics(self.active, self.previous, agent)


class ActiveTopicsStore(ABC):
    """The active topic of every chat of one profile, by the chat's base key."""

    async def load(self) -> None:
        """Read what is kept before the first use (a database has nothing to read ahead)."""

    @abstractmethod
    async def state(self, base_key: str) -> ChatTopics: ...

    @abstractmethod
    async def change(self, base_key: str, step: Callable[[ChatTopics], ChatTopics]) -> ChatTopics:
        """Apply `step` to the chat's stored topics atomically; the new state, once stored."""

    async def active(self, base_key: str) -> str | None:
        """The active topic of a chat; None is its default session."""
        return (await self.state(base_key)).active

    async def switch(self, base_key: str, topic: str | None) -> None:
        await self.change(base_key, lambda state: state.switched(topic))

    async def back(self, base_key: str) -> str | None:
        """Switch to the previous topic and return it (the active one stays if there is none)."""
        return (await self.change(base_key, ChatTopics.back)).active

    async def forget(self, base_key: str, topic: str) -> None:
        await self.change(base_key, lambda state: state.forgotten(topic))

    async def choose_agent(self, base_key: str, agent: str | None) -> None:
        await self.change(base_key, lambda state: state.with_agent(agent))


class ActiveTopics(ActiveTopicsStore):
    """The JSONL backend's topics: one file per profile, held in memory, rewritten per change."""

    def __init__(self, root: Path) -> None:
        self.path = root / ACTIVE_TOPICS_FILE
        self._active: dict[str, str] = {}
        self._previous: dict[str, str] = {}
        self._agent: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        """Read the file; a missing one means every chat is on its default session."""
        data = await asyncio.to_thread(self._read)
        self._active = {
            base: topic for base, topic in data.get("active", {}).items() if _topic(topic)
        }
        self._previous = dict(data.get("previous", {}))
        self._agent = dict(data.get("agent", {}))

    async def state(self, base_key: str) -> ChatTopics:
        return ChatTopics(
            self._active.get(base_key), self._previous.get(base_key), self._agent.get(base_key)
        )

    async def active(self, base_key: str) -> str | None:
        # `state(base_key).active` without building the state: every turn asks this.
        return self._active.get(base_key)

    def chats(self) -> dict[str, ChatTopics]:
        """Every chat with a topic or a previous one, as loaded (`store migrate` copies them)."""
        return {
            base: ChatTopics(
                self._active.get(base), self._previous.get(base), self._agent.get(base)
            )
            for base in sorted(self._active.keys() | self._previous.keys() | self._agent.keys())
        }

    async def change(self, base_key: str, step: Callable[[ChatTopics], ChatTopics]) -> ChatTopics:
        async with self._lock:
            before = await self.state(base_key)
            after = step(before)
            if after == before:
                return after
            # Memory follows the file only once it is written: a failed write changes nothing.
            active = _put(self._active, base_key, after.active)
            previous = _put(self._previous, base_key, after.previous)
            agent = _put(self._agent, base_key, after.agent)
            sections = {"active": active, "previous": previous}
            if agent:
                sections["agent"] = agent
            content = json.dumps(
                sections,
                ensure_ascii=False,
                indent=1,
                sort_keys=True,
            ).encode()
            await asyncio.to_thread(self._write, content + b"\n")
            self._active, self._previous, self._agent = active, previous, agent
            return after

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(raw)
            return {
                section: {str(k): str(v) for k, v in data.get(section, {}).items()}
                for section in ("active", "previous", "agent")
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


def _put(section: dict[str, str], base_key: str, value: str | None) -> dict[str, str]:
    """A copy of `section` with the chat's entry set (None: removed)."""
    changed = dict(section)
    if value is None:
        changed.pop(base_key, None)
    else:
        changed[base_key] = value
    return changed
