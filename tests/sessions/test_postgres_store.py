"""PostgresSessionStore against the real server: the same contract as the session files."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine

import asyncpg
import pytest

from bus import Message
from sessions import (
    EmptyRewriteRefused,
    Session,
    SessionError,
    SessionExists,
    SessionManager,
    SessionStoreClosed,
    UnsupportedSessionSchema,
)
from sessions.postgres import (
    SCHEMA_VERSION,
    PostgresSessionStore,
    StoreSchemaTooNew,
    StoreUnavailable,
    ensure_schema,
)
from tests.sessions.conftest import chat_key, contents, numbered
from tests.support.postgres import fresh_scope


async def test_appended_messages_load_back_in_order_with_meta(
    pg_store: PostgresSessionStore,
) -> None:
    key = chat_key(1, "research")
    first = Message.user("  what is the weather like on the moon today?  ")
    rest = numbered(30)
    await pg_store.append(key, first)
    await pg_store.append_all(key, rest)
    session = await pg_store.load(key)
    assert session is not None
    assert session.key == key
    assert session.meta.topic == "research"
    assert session.meta.session_key == str(key)
    assert session.meta.title == "what is the weather like on the moon today?"
    assert session.messages == [first, *rest]  # equal Message objects, timestamps and all


async def test_a_message_round_trips_exactly(pg_store: PostgresSessionStore) -> None:
    key = chat_key(2)
    odd = Message.user('nul \x00, emoji 👩‍👩‍👧, quote " and \\ backslash')
    await pg_store.append_all(key, [odd, Message.assistant("ok")])
    session = await pg_store.load(key)
    assert session is not None
    assert session.messages[0] == odd
    assert session.messages[0].to_json() == odd.to_json()


async def test_messages_given_with_their_lines_round_trip_exactly(
    pg_store: PostgresSessionStore,
) -> None:
    # The dispatcher hands over the lines it journaled; newlines and line separators inside a
    # message are escaped in JSON, so the lines split back into exactly these messages.
    key = chat_key("lines")
    turn = [Message.user("two\nlines, a \u2028 separator"), Message.assistant("ok\r\n")]
    await pg_store.append_all(key, turn, lines=Message.lines_of(turn))
    session = await pg_store.load(key)
    assert session is not None
    assert session.messages == turn


async def test_a_missing_session_loads_as_none(pg_store: PostgresSessionStore) -> None:
    assert await pg_store.load(chat_key("nobody")) is None


async def test_a_replayed_append_adds_nothing(pg_store: PostgresSessionStore) -> None:
    key = chat_key(3)
    turn = [Message.user("hello"), Message.assistant("hi")]
    await pg_store.append_all(key, turn)
    await pg_store.append_all(key, turn)  # the same messages again (a replay after a crash)
    await pg_store.append(key, Message.user("hello"))  # the same words later: a new message
    session = await pg_store.load(key)
    assert session is not None
    assert contents(session.messages) == ["hello", "hi", "hello"]
    [info] = await pg_store.list(key.base_key())
    assert info.message_count == 3


async def test_concurrent_appends_keep_every_message_in_call_order(
    postgres_dsn: str,
) -> None:
    key = chat_key(4)
    scope = fresh_scope()
    async with (
        PostgresSessionStore(postgres_dsn, scope) as first,
        PostgresSessionStore(postgres_dsn, scope) as second,
    ):

        async def writer(store: PostgresSessionStore, name: str) -> None:
            for index in range(25):
                await store.append(key, Message.user(f"{name} {index}"))

        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(writer(first, "a"), name="writer-a")
            tasks.create_task(writer(second, "b"), name="writer-b")
            # Appends of one store to one session, called at once, are stored in call order.
            tasks.create_task(
                _gathered([first.append(key, Message.user(f"c {index}")) for index in range(25)]),
                name="writer-c",
            )
        session = await first.load(key)
    assert session is not None
    texts = contents(session.messages)
    assert len(texts) == 75
    for name in "abc":
        assert [t for t in texts if t.startswith(f"{name} ")] == [
            f"{name} {index}" for index in range(25)
        ]


async def _gathered(appends: list[Coroutine[None, None, None]]) -> None:
    await asyncio.gather(*appends)


async def test_list_reports_live_sessions_of_the_scope_only(postgres_dsn: str) -> None:
    async with (
        PostgresSessionStore(postgres_dsn, fresh_scope()) as mine,
        PostgresSessionStore(postgres_dsn, fresh_scope()) as theirs,
    ):
        await mine.append_all(chat_key(5), numbered(3))
        await mine.append_all(chat_key(5, "side"), numbered(2))
        await mine.append_all(chat_key(6), numbered(1))
        await theirs.append_all(chat_key(5), numbered(9))
        listed = {str(info.key): info for info in await mine.list()}
        assert set(listed) == {str(chat_key(5)), str(chat_key(5, "side")), str(chat_key(6))}
        assert listed[str(chat_key(5))].message_count == 3
        assert listed[str(chat_key(5, "side"))].topic == "side"
        assert listed[str(chat_key(5))].title == "message 0"
        assert listed[str(chat_key(5))].size > 0
        of_chat = await mine.list(chat_key(5).base_key())
        assert {str(info.key) for info in of_chat} == {str(chat_key(5)), str(chat_key(5, "side"))}


async def test_archive_keeps_history_and_starts_over(
    pg_store: PostgresSessionStore, postgres_dsn: str
) -> None:
    key = chat_key(7)
    await pg_store.append_all(key, numbered(4))
    where = await pg_store.archive(key)
    assert where is not None
    assert await pg_store.load(key) is None
    assert await pg_store.list() == []
    assert await pg_store.archive(key) is None
    await pg_store.append(key, Message.user("fresh start"))
    session = await pg_store.load(key)
    assert session is not None
    assert contents(session.messages) == ["fresh start"]
    connection = await asyncpg.connect(postgres_dsn)
    try:
        kept = await connection.fetchval(
            "SELECT count(*) FROM octos_messages m JOIN octos_sessions s ON s.id = m.session_id "
            "WHERE s.scope = $1 AND s.session_key = $2 AND s.archived_at IS NOT NULL",
            pg_store.scope,
            str(key),
        )
    finally:
        await connection.close()
    assert kept == 4


async def test_fork_copies_the_last_messages_and_records_the_parent(
    pg_store: PostgresSessionStore,
) -> None:
    parent, child = chat_key(8), chat_key(8, "branch")
    await pg_store.append_all(parent, numbered(6))
    forked = await pg_store.fork(parent, child, 2)
    assert contents(forked.messages) == ["message 4", "message 5"]
    loaded = await pg_store.load(child)
    assert loaded is not None
    assert loaded.parent_key == parent
    assert contents(loaded.messages) == ["message 4", "message 5"]
    assert loaded.meta.title == "message 4"
    with pytest.raises(SessionExists):
        await pg_store.fork(parent, child, 2)
    unchanged = await pg_store.load(child)
    assert unchanged is not None
    assert contents(unchanged.messages) == ["message 4", "message 5"]


async def test_rewrite_replaces_atomically_and_refuses_an_empty_one(
    pg_store: PostgresSessionStore,
) -> None:
    key = chat_key(9)
    await pg_store.append_all(key, numbered(5))
    before = await pg_store.load(key)
    assert before is not None
    await pg_store.rewrite(Session(key, before.meta, before.messages[-2:]))
    after = await pg_store.load(key)
    assert after is not None
    assert contents(after.messages) == ["message 3", "message 4"]
    assert after.meta.created_at == before.meta.created_at
    await pg_store.append(key, Message.user("after the rewrite"))
    appended = await pg_store.load(key)
    assert appended is not None
    assert contents(appended.messages) == ["message 3", "message 4", "after the rewrite"]
    with pytest.raises(EmptyRewriteRefused):
        await pg_store.rewrite(Session(key, before.meta, []))
    assert (await pg_store.load(key)) == appended


async def test_a_session_of_a_newer_schema_is_refused_not_read(
    pg_store: PostgresSessionStore, postgres_dsn: str
) -> None:
    key = chat_key(10)
    await pg_store.append(key, Message.user("from the future"))
    connection = await asyncpg.connect(postgres_dsn)
    try:
        await connection.execute(
            "UPDATE octos_sessions SET schema_version = 99 WHERE scope = $1", pg_store.scope
        )
    finally:
        await connection.close()
    with pytest.raises(UnsupportedSessionSchema) as refused:
        await pg_store.load(key)
    assert refused.value.found == 99
    assert "Upgrade octos-gateway" in str(refused.value)
    with pytest.raises(UnsupportedSessionSchema):
        await pg_store.append(key, Message.user("more"))
    assert await pg_store.list() == []  # skipped with a warning, as a newer file is


async def test_a_database_migrated_by_a_newer_build_is_refused(postgres_dsn: str) -> None:
    connection = await asyncpg.connect(postgres_dsn)
    try:
        await ensure_schema(connection, "test")
        await connection.execute(
            "INSERT INTO octos_schema_migrations (version) VALUES ($1)", SCHEMA_VERSION + 1
        )
        try:
            with pytest.raises(StoreSchemaTooNew, match="Upgrade octos-gateway"):
                await PostgresSessionStore(postgres_dsn, fresh_scope()).open()
            with pytest.raises(StoreSchemaTooNew):
                await PostgresSessionStore(postgres_dsn, fresh_scope(), read_only=True).open()
        finally:
            await connection.execute(
                "DELETE FROM octos_schema_migrations WHERE version = $1", SCHEMA_VERSION + 1
            )
    finally:
        await connection.close()


async def test_schema_creation_is_idempotent(postgres_dsn: str) -> None:
    connection = await asyncpg.connect(postgres_dsn)
    try:
        await ensure_schema(connection, "test")
        await ensure_schema(connection, "test")
        versions = await connection.fetch("SELECT version FROM octos_schema_migrations")
    finally:
        await connection.close()
    assert [row["version"] for row in versions] == list(range(1, SCHEMA_VERSION + 1))


async def test_a_read_only_store_refuses_changes(
    pg_store: PostgresSessionStore, postgres_dsn: str
) -> None:
    key = chat_key(11)
    await pg_store.append(key, Message.user("hi"))
    async with PostgresSessionStore(postgres_dsn, pg_store.scope, read_only=True) as reader:
        session = await reader.load(key)
        assert session is not None
        assert contents(session.messages) == ["hi"]
        with pytest.raises(SessionError, match="read-only"):
            await reader.append(key, Message.user("no"))
        with pytest.raises(SessionError, match="read-only"):
            await reader.archive(key)


async def test_a_closed_store_refuses_work(postgres_dsn: str) -> None:
    store = PostgresSessionStore(postgres_dsn, fresh_scope())
    with pytest.raises(SessionStoreClosed):
        await store.load(chat_key(12))


async def test_an_unreachable_server_names_the_dsn_without_its_password() -> None:
    from tests.support.daemon import free_port

    dsn = f"postgresql://octos:hunter2secret@127.0.0.1:{free_port()}/sessions"
    with pytest.raises(StoreUnavailable) as refused:
        await PostgresSessionStore(dsn, "main", connect_timeout_s=5).open()
    text = str(refused.value)
    assert "hunter2secret" not in text
    assert "postgresql://octos:***@127.0.0.1:" in text
    assert "check that the server runs" in text


async def test_an_unknown_database_is_a_clear_error(postgres_dsn: str) -> None:
    missing = postgres_dsn.rsplit("/", 1)[0] + "/octos_no_such_database"
    with pytest.raises(StoreUnavailable, match="octos_no_such_database"):
        await PostgresSessionStore(missing, "main").open()


async def test_the_manager_works_over_postgres(pg_store: PostgresSessionStore) -> None:
    manager = SessionManager(pg_store, max_open=2)
    key = chat_key(13)
    await manager.append_all(key, [Message.user("one"), Message.assistant("two")])
    for chat in range(14, 18):  # evicts the first session
        await manager.append(chat_key(chat), Message.user("filler"))
    assert key not in manager
    assert contents(await manager.history(key)) == ["one", "two"]
    await manager.reset(key)
    assert await manager.history(key) == []
    await pg_store.sync()  # committed already: nothing to do, and no error
