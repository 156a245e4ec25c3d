"""The PostgreSQL schema of the session store, created and migrated at start-up, idempotently.

    octos_schema_migrations  one row per applied migration (its version)
    octos_sessions           one row per session: its meta, counters; archived rows are kept
    octos_messages           one row per message: (session id, seq) and the message as JSON
    octos_migrated_files     session files `store migrate` copied, how many of their messages
    octos_active_topics      one row per chat: its active topic and the one before (`/s`,
                             `/back`), so every worker of a cluster answers in the same session,
                             and the agent it chose (`/agent`)
    octos_pairing_codes      one row per pairing code issued (a day's worth): whose, until when,
                             whether redeemed (`channels.access.pairing` as a table)
    octos_allowed_senders    one row per sender approved by pairing (the allow-list overlay)

An append is one call of `octos_append` (one statement, one round trip, atomic): it upserts the
session row, inserts the batch with one INSERT and counts what was new. A live session is the
row of its (scope, key) with `archived_at` null (a partial unique index); `archive` stamps it,
so the history stays. Messages are unique per session by a fingerprint (the
SHA-256 of their JSON, which includes their timestamp), so a replayed append adds nothing.
Messages are `json`, not `jsonb`: kept byte for byte, and `\\u0000` in a text is accepted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sessions.errors import SessionError

if TYPE_CHECKING:
    from sessions.postgres.connect import Connection

#: The newest schema this build creates and reads.
SCHEMA_VERSION: Final = 4
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
    CREATE OR REPLACE FUNCTION octos_append(
        p_scope text, p_key text, p_base text, p_topic text, p_schema integer, p_meta json,
        p_title text, p_parent text, p_created timestamptz, p_now timestamptz,
        p_meta_bytes bigint, p_supported integer, p_fingerprints bytea[], p_messages text[],
        p_sizes bigint[]
    ) RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        v_id bigint;
        v_next bigint;
        v_schema integer;
        v_count bigint;
        v_bytes bigint;
    BEGIN
        SELECT schema_version INTO v_schema FROM octos_sessions
            WHERE scope = p_scope AND session_key = p_key AND archived_at IS NULL FOR UPDATE;
        IF v_schema > p_supported THEN
            RETURN v_schema;  -- a newer build's session: left untouched
        END IF;
        INSERT INTO octos_sessions (scope, session_key, base_key, topic, schema_version, meta,
                                    title, parent_key, created_at, updated_at, bytes)
        VALUES (p_scope, p_key, p_base, p_topic, p_schema, p_meta, p_title, p_parent,
                p_created, p_now, p_meta_bytes)
        ON CONFLICT (scope, session_key) WHERE archived_at IS NULL
        DO UPDATE SET updated_at = EXCLUDED.updated_at
        RETURNING id, next_seq, schema_version INTO v_id, v_next, v_schema;
        WITH inserted AS (
            INSERT INTO octos_messages (session_id, seq, fingerprint, message)
            SELECT v_id, v_next + item.ord - 1, item.fingerprint, item.message::json
            FROM unnest(p_fingerprints, p_messages) WITH ORDINALITY
                AS item(fingerprint, message, ord)
            ON CONFLICT (session_id, fingerprint) DO NOTHING
            RETURNING seq
        )
        SELECT count(*), coalesce(sum(p_sizes[seq - v_next + 1]), 0)
            INTO v_count, v_bytes FROM inserted;
        UPDATE octos_sessions SET next_seq = next_seq + cardinality(p_messages),
            message_count = message_count + v_count, bytes = bytes + v_bytes
            WHERE id = v_id;
        RETURN v_schema;
    END
    $$;
    CREATE TABLE IF NOT EXISTS octos_migrated_files (
        source text PRIMARY KEY,
        scope text NOT NULL,
        session_key text NOT NULL,
        session_id bigint NOT NULL REFERENCES octos_sessions (id),
        messages bigint NOT NULL,
        migrated_at timestamptz NOT NULL DEFAULT now()
    );
    """,
    2: """
    CREATE TABLE IF NOT EXISTS octos_active_topics (
        scope text NOT NULL,
        base_key text NOT NULL,
        active text,
        previous text,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (scope, base_key)
    );
    """,
    3: """
    CREATE TABLE IF NOT EXISTS octos_pairing_codes (
        code text PRIMARY KEY,
        scope text NOT NULL,
        channel text NOT NULL,
        sender_id text NOT NULL,
        chat_id text NOT NULL,
        issued_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL,
        redeemed_at timestamptz
    );
    CREATE INDEX IF NOT EXISTS octos_pairing_codes_sender
        ON octos_pairing_codes (scope, channel, sender_id, issued_at);
    CREATE TABLE IF NOT EXISTS octos_allowed_senders (
        scope text NOT NULL,
        channel text NOT NULL,
        sender_id text NOT NULL,
        added_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (scope, channel, sender_id)
    );
    """,
    4: """
    ALTER TABLE octos_active_topics ADD COLUMN IF NOT EXISTS agent text;
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


async def applied_version(connection: Connection) -> int:
    """The newest migration applied to the database; 0 when it has no session tables yet."""
    exists = await connection.fetchval("SELECT to_regclass('octos_schema_migrations')")
    if exists is None:
        return 0
    version = await connection.fetchval("SELECT max(version) FROM octos_schema_migrations")
    return int(version or 0)


async def ensure_schema(connection: Connection, where: str) -> int:
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
