"""Active topics in PostgreSQL: what one process switches, another reads; changes are atomic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from config.store import StoreConfig
from sessions import ActiveTopics, SessionError
from sessions.backends import active_topics, session_store
from sessions.postgres import PostgresSessionStore
from sessions.postgres.topics import PostgresActiveTopics
from sessions.topics import ChatTopics
from tests.support.postgres import fresh_scope, own_database_dsn

__all__ = ["own_database_dsn"]  # the fixture

CHAT = "_main:telegram:1"


async def test_a_switch_on_one_process_is_what_another_reads(postgres_dsn: str) -> None:
    scope = fresh_scope()
    async with (
        PostgresSessionStore(postgres_dsn, scope) as first_store,
        PostgresSessionStore(postgres_dsn, scope) as second_store,
    ):
        first, second = PostgresActiveTopics(first_store), PostgresActiveTopics(second_store)
        assert await second.active(CHAT) is None
        await first.switch(CHAT, "work")
        assert await second.active(CHAT) == "work"
        assert await second.back(CHAT) is None
        assert await first.state(CHAT) == ChatTopics(None, "work")
        await second.switch(CHAT, "ideas")
        await first.forget(CHAT, "ideas")
        assert await second.state(CHAT) == ChatTopics(None, None)


async def test_profiles_do_not_see_each_others_topics(postgres_dsn: str) -> None:
    async with (
        PostgresSessionStore(postgres_dsn, fresh_scope()) as one,
        PostgresSessionStore(postgres_dsn, fresh_scope()) as other,
    ):
        await PostgresActiveTopics(one).switch(CHAT, "work")
        assert await PostgresActiveTopics(other).active(CHAT) is None


async def test_concurrent_switches_never_lose_a_step(postgres_dsn: str) -> None:
    """Each switch reads the state another just wrote (the row is locked), so the previous
    topic is always one that was active: never a step lost to a race."""
    scope = fresh_scope()
    async with PostgresSessionStore(postgres_dsn, scope, pool_size=8) as store:
        topics = PostgresActiveTopics(store)
        names = [f"t{index}" for index in range(16)]
        await asyncio.gather(*(topics.switch(CHAT, name) for name in names))
        final = await topics.state(CHAT)
        assert final.active in names
        assert final.previous in names
        assert final.previous != final.active
        async with store.connection() as connection:
            rows = await connection.fetchval(
                "SELECT count(*) FROM octos_active_topics WHERE scope = $1", scope
            )
        assert rows == 1


async def test_a_read_only_store_reads_topics_and_refuses_changes(postgres_dsn: str) -> None:
    scope = fresh_scope()
    async with PostgresSessionStore(postgres_dsn, scope) as writer:
        await PostgresActiveTopics(writer).switch(CHAT, "work")
    async with PostgresSessionStore(postgres_dsn, scope, read_only=True) as reader:
        topics = PostgresActiveTopics(reader)
        assert await topics.active(CHAT) == "work"
        with pytest.raises(SessionError, match="read-only"):
            await topics.switch(CHAT, None)


async def test_a_read_only_store_on_an_empty_database_sees_default_topics(
    own_database_dsn: str,
) -> None:
    async with PostgresSessionStore(own_database_dsn, "p", read_only=True) as reader:
        assert await PostgresActiveTopics(reader).active(CHAT) is None


async def test_the_backend_keeps_topics_beside_the_sessions(
    postgres_dsn: str, tmp_path: Path
) -> None:
    config = StoreConfig.model_validate({"backend": "postgres", "dsn": postgres_dsn})
    root = tmp_path / "profile"
    async with session_store(config, root) as store:
        assert isinstance(active_topics(config, root, store), PostgresActiveTopics)
    async with session_store(StoreConfig(), root) as files:
        assert isinstance(active_topics(StoreConfig(), root, files), ActiveTopics)


async def test_a_chats_agent_is_what_every_process_reads(postgres_dsn: str) -> None:
    scope = fresh_scope()
    async with (
        PostgresSessionStore(postgres_dsn, scope) as first_store,
        PostgresSessionStore(postgres_dsn, scope) as second_store,
    ):
        first, second = PostgresActiveTopics(first_store), PostgresActiveTopics(second_store)
        await first.choose_agent(CHAT, "coder")
        await second.switch(CHAT, "work")
        assert await first.state(CHAT) == ChatTopics("work", "", "coder")
