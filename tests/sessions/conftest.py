from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bus import Message, SessionKey
from sessions import SessionStore


def chat_key(chat: int | str, topic: str | None = None) -> SessionKey:
    return SessionKey("telegram", str(chat), "_main", topic)


def numbered(count: int, start: int = 0) -> list[Message]:
    return [Message.user(f"message {index}") for index in range(start, start + count)]


def contents(messages: list[Message]) -> list[str]:
    return [message.content for message in messages]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with SessionStore(tmp_path / "data") as opened:
        yield opened
