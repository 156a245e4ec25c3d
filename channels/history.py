"""What a channel may read of its profile's sessions (the HTTP API lists them); the gateway
provides it."""

from __future__ import annotations

from typing import Protocol

from bus import Message


class HistoryUnavailable(Exception):
    """A session exists but cannot be read (a newer schema_version, a key collision); the
    message says which file and why. The API answers it as 409 with that reason."""


class ChatHistory(Protocol):
    async def sessions(self, channel: str) -> list[dict[str, object]]:
        """This profile's sessions on `channel`: key, chat id, topic, counts, updated_at."""
        ...

    async def messages(self, channel: str, chat_id: str) -> list[Message]:
        """The active session's messages of one chat, oldest first; `HistoryUnavailable` when
        its file cannot be read."""
        ...
