"""A PostgreSQL database of the test run's own, on the server at 127.0.0.1:5432.

`OCTOS_TEST_POSTGRES` names the server (an admin DSN; default: user postgres, trust auth). A run
creates a database with a random name and drops it at the end. A missing server fails the tests
that need it, with the way to fix it: it is never a silent skip.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

ADMIN_DSN = os.environ.get("OCTOS_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
CONNECT_TIMEOUT_S = 10.0


def dsn_for(database: str, admin_dsn: str = ADMIN_DSN) -> str:
    parts = urlsplit(admin_dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, ""))


async def _admin(statement: str) -> None:
    connection = await asyncpg.connect(ADMIN_DSN, timeout=CONNECT_TIMEOUT_S)
    try:
        await connection.execute(statement, timeout=CONNECT_TIMEOUT_S * 3)
    finally:
        await connection.close(timeout=CONNECT_TIMEOUT_S)


async def column(dsn: str, query: str, *args: object) -> list[object]:
    """The first column of `query`'s rows, read on a connection of its own."""
    connection = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT_S)
    try:
        rows = await connection.fetch(query, *args, timeout=CONNECT_TIMEOUT_S * 3)
    finally:
        await connection.close(timeout=CONNECT_TIMEOUT_S)
    return [row[0] for row in rows]


async def session_messages(
    dsn: str, profile: str, key: str, *, archived_too: bool = False
) -> list[tuple[str, str]]:
    """The (role, content) of every message stored in `profile`'s session `key`, in order: the
    live session's, or (`archived_too`) every session's under that key, archived ones too."""
    live_only = "" if archived_too else " AND s.archived_at IS NULL"
    connection = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT_S)
    try:
        rows = await connection.fetch(
            "SELECT m.message->>'role' AS role, m.message->>'content' AS content "
            "FROM octos_messages m JOIN octos_sessions s ON s.id = m.session_id "
            f"WHERE s.scope = $1 AND s.session_key = $2{live_only} ORDER BY m.seq",
            profile,
            key,
            timeout=CONNECT_TIMEOUT_S * 3,
        )
    finally:
        await connection.close(timeout=CONNECT_TIMEOUT_S)
    return [(row["role"], row["content"]) for row in rows]


def create_database() -> str:
    name = f"octos_test_{secrets.token_hex(6)}"
    try:
        asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, TimeoutError, asyncpg.PostgresError) as error:
        pytest.fail(
            f"PostgreSQL is needed at {ADMIN_DSN} (set OCTOS_TEST_POSTGRES to another admin "
            f"DSN): {error}; start it, e.g. `pg_ctlcluster 15 main start`",
            pytrace=False,
        )
    return name


def drop_database(name: str) -> None:
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The DSN of a database of this test run's own (dropped afterwards)."""
    name = create_database()
    try:
        yield dsn_for(name)
    finally:
        drop_database(name)


def fresh_scope() -> str:
    """A profile id no other test uses, so tests share the run's database without meeting."""
    return f"p{secrets.token_hex(4)}"


@pytest.fixture
def own_database_dsn() -> Iterator[str]:
    """A database of one test's own, for tests that count every row (dropped afterwards)."""
    name = create_database()
    try:
        yield dsn_for(name)
    finally:
        drop_database(name)
