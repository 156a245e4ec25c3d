from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bus import Message, SessionKey
from sessions import SessionStore
from sessions.postgres import PostgresSessionStore
from tests.support.postgres import fresh_scope, postgres_dsn

__all__ = ["postgres_dsn"]  # the fixture, for the tests of this directory


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


@pytest.fixture
async def pg_store(postgres_dsn: str) -> AsyncIterator[PostgresSessionStore]:
    """A PostgreSQL store of a profile of its own, in the test run's database."""
    async with PostgresSessionStore(postgres_dsn, fresh_scope()) as opened:
        yield opened
