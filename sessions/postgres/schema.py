"""The PostgreSQL schema of the session store, created and migrated at start-up, idempotently.

    octos_schema_migrations  one row per applied migration (its version)
    octos_sessions           one row per session: its meta, counters; archived rows are kept
    octos_messages           one row per message: (session id, seq) and the message as JSON
    octos_migrated_files     session files `store migrate` copied already (resumable)

A live session is the row of its (scope, key) with `archived_at` null (a partial unique index);
`archive` stamps it, so the history stays. Messages are unique per session by a fingerprint (the
SHA-256 of their JSON, which includes their timestamp), so a replayed append adds nothing.
Messages are `json`, not `jsonb`: kept byte for byte, and `\\u0000` in a text is accepted.
"""

from __future__ import annotations

from typing import Final

import asyncpg

from sessions.errors import SessionError

#: The newest schema this build creates and reads.
SCHEMA_VERSION: Final = 1
#: Serialises concurrent start-ups migrating the same database (any constant key works).
_MIGRATION_LOCK: Final = 0x6F63746F73  # "octos"

_MIGRATIONS: Final[dict[int, str]] = {
    1: """
    CREATE TABLE IF NOT EXISTS octos_sessions (
        id bigserial PRIMARY KEY,
        scope text NOT NULL,
        session_key text NOT NULL,
        base_key text NOT NULL,
        topic text,
        schema_version integer NOT NULL,
        meta json NOT NULL,
        title text,
        parent_key text,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        next_seq bigint NOT NULL DEFAULT 0,
        message_count bigint NOT NULL DEFAULT 0,
        bytes bigint NOT NULL DEFAULT 0,
        archived_at timestamptz,
        archive_reason text
    );
    CREATE UNIQUE INDEX IF NOT EXISTS octos_sessions_live
        ON octos_sessions (scope, session_key) WHERE archived_at IS NULL;
    CREATE INDEX IF NOT EXISTS octos_sessions_base
        ON octos_sessions (scope, base_key) WHERE archived_at IS NULL;
    CREATE TABLE IF NOT EXISTS octos_messages (
        session_id bigint NOT NULL REFERENCES octos_sessions (id),
        seq bigint NOT NULL,
        fingerprint bytea NOT NULL,
        message json NOT NULL,
        PRIMARY KEY (session_id, seq),
        UNIQUE (session_id, fingerprint)
    );
    CREATE TABLE IF NOT EXISTS octos_migrated_files (
        source text PRIMARY KEY,
        scope text NOT NULL,
        session_key text NOT NULL,
        messages bigint NOT NULL,
        migrated_at timestamptz NOT NULL DEFAULT now()
    );
    """,
}


class StoreSchemaTooNew(SessionError):
    """The database was migrated by a newer build: writing to it could lose what we ignore."""

    def __init__(self, where: str, found: int) -> None:
        self.found = found
        super().__init__(
            f"the session tables in {where} have schema version {found}; this build knows "
            f"version {SCHEMA_VERSION} or older. Upgrade octos-gateway (the database was left "
            "untouched)."
        )


async def applied_version(connection: asyncpg.Connection) -> int:
    """The newest migration applied to the database; 0 when it has no session tables yet."""
    exists = await connection.fetchval("SELECT to_regclass('octos_schema_migrations')")
    if exists is None:
        return 0
    version = await connection.fetchval("SELECT max(version) FROM octos_schema_migrations")
    return int(version or 0)


async def ensure_schema(connection: asyncpg.Connection, where: str) -> int:
    """Apply what is missing (in one transaction, under an advisory lock); the version now."""
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS octos_schema_migrations ("
            " version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = await applied_version(connection)
        if current > SCHEMA_VERSION:
            raise StoreSchemaTooNew(where, current)
        for version in sorted(_MIGRATIONS):
            if version > current:
                await connection.execute(_MIGRATIONS[version])
                await connection.execute(
                    "INSERT INTO octos_schema_migrations (version) VALUES ($1)", version
                )
    return max(current, SCHEMA_VERSION)
