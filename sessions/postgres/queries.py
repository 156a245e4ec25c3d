"""The store's work on one connection: each function is one operation, atomic by itself or in
the caller's transaction. `where` names the database (password redacted) in errors. The
statements are shared with the migration from files (`sessions.postgres.importing`)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Final

from bus import Message, SessionKey
from bus.message import utc_now
from sessions.errors import (
    EmptyRewriteRefused,
    SessionError,
    SessionExists,
    UnsupportedSessionSchema,
)
from sessions.meta import CURRENT_SCHEMA_VERSION, SessionMeta
from sessions.session import Session, SessionInfo

APPEND: Final = (
    "SELECT octos_append($1, $2, $3, $4, $5, $6::json, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
)
LIVE_ROW: Final = """
SELECT id, schema_version, meta::text AS meta, updated_at, message_count
FROM octos_sessions WHERE scope = $1 AND session_key = $2 AND archived_at IS NULL
"""
#: The live row and its messages in order, in one statement: one snapshot, one round trip.
LIVE_SESSION: Final = """
SELECT s.schema_version, s.meta::text AS meta, s.updated_at,
       ARRAY(SELECT m.message::text FROM octos_messages m WHERE m.session_id = s.id
             ORDER BY m.seq) AS messages
FROM octos_sessions s WHERE s.scope = $1 AND s.session_key = $2 AND s.archived_at IS NULL
"""
UPSERT_ROW: Final = """
INSERT INTO octos_sessions (scope, session_key, base_key, topic, schema_version, meta, title,
                            parent_key, created_at, updated_at, bytes)
VALUES ($1, $2, $3, $4, $5, $6::json, $7, $8, $9, $10, $11)
ON CONFLICT (scope, session_key) WHERE archived_at IS NULL
DO UPDATE SET updated_at = EXCLUDED.updated_at
RETURNING id, next_seq, schema_version
"""
INSERT_MESSAGES: Final = """
INSERT INTO octos_messages (session_id, seq, fingerprint, message)
SELECT $1, $2 + item.ord - 1, item.fingerprint, item.message::json
FROM unnest($3::bytea[], $4::text[]) WITH ORDINALITY AS item(fingerprint, message, ord)
ON CONFLICT (session_id, fingerprint) DO NOTHING
RETURNING seq
"""
COUNT_APPENDED: Final = """
UPDATE octos_sessions SET next_seq = next_seq + $2, message_count = message_count + $3,
    bytes = bytes + $4 WHERE id = $1
"""
LIST: Final = """
SELECT session_key, topic, message_count, bytes, updated_at, title, parent_key, schema_version, id
FROM octos_sessions WHERE scope = $1 AND archived_at IS NULL AND ($2::text IS NULL OR base_key = $2)
ORDER BY base_key, session_key
"""


def fingerprint(encoded: str) -> bytes:
    return hashlib.sha256(encoded.encode()).digest()


def line_bytes(encoded: str) -> int:
    return len(encoded.encode()) + 1  # as a JSONL line, so `size` reads like the file's


if TYPE_CHECKING:
    from sessions.postgres.connect import Connection


class UnsupportedStoredSchema(UnsupportedSessionSchema):
    """A session row written by a newer build (the same refusal as a newer session file)."""

    def __init__(self, where: str, found: int) -> None:
        SessionError.__init__(
            self,
            f"session {where} has schema_version {found}; this build reads schema_version "
            f"{CURRENT_SCHEMA_VERSION} or older. Upgrade octos-gateway to open it (the row was "
            "left untouched).",
        )
        self.path = where
        self.found = found
        self.supported = CURRENT_SCHEMA_VERSION


def title_column(meta: SessionMeta) -> str | None:
    # A `text` column cannot hold NUL (the meta's JSON keeps the title as it is).
    return None if meta.title is None else meta.title.replace("\x00", "")


def row_columns(
    scope: str, key: SessionKey, meta: SessionMeta, meta_text: str
) -> tuple[object, ...]:
    """A session row's leading columns, scope to created_at, in the table's order: every
    statement that creates a row (append, rewrite, import) passes them first."""
    return (
        scope,
        str(key),
        key.base_key(),
        key.topic(),
        meta.schema_version,
        meta_text,
        title_column(meta),
        meta.parent_key,
        meta.created_at,
    )


def _named(key: SessionKey, where: str) -> str:
    return f"{str(key)!r} in {where}"


async def append_messages(
    connection: Connection,
    scope: str,
    key: SessionKey,
    initial: SessionMeta,
    encoded: list[str],
    where: str,
) -> None:
    """One `octos_append` call: creates the session with `initial` if it is new."""
    meta_text = initial.to_json()
    found = await connection.fetchval(
        APPEND,
        *row_columns(scope, key, initial, meta_text),
        utc_now(),
        line_bytes(meta_text),
        CURRENT_SCHEMA_VERSION,
        [fingerprint(text) for text in encoded],
        encoded,
        [line_bytes(text) for text in encoded],
    )
    if found > CURRENT_SCHEMA_VERSION:
        raise UnsupportedStoredSchema(_named(key, where), found)


async def load_session(
    connection: Connection, scope: str, key: SessionKey, where: str
) -> Session | None:
    row = await connection.fetchrow(LIVE_SESSION, scope, str(key))
    if row is None:
        return None
    if row["schema_version"] > CURRENT_SCHEMA_VERSION:
        raise UnsupportedStoredSchema(_named(key, where), row["schema_version"])
    meta = SessionMeta.model_validate_json(row["meta"])
    meta = meta.model_copy(update={"updated_at": row["updated_at"]})
    return Session(key, meta, [Message.from_json(line) for line in row["messages"]])


async def replace_session(
    connection: Connection,
    scope: str,
    session: Session,
    where: str,
    *,
    create_only: bool,
) -> None:
    """Archive the live row (if any) and write `session` as the new one (in a transaction)."""
    key = session.key
    row = await connection.fetchrow(LIVE_ROW + " FOR UPDATE", scope, str(key))
    if row is not None:
        if create_only:
            raise SessionExists(str(key), _named(key, where))
        if not session.messages and row["message_count"] > 0:
            raise EmptyRewriteRefused(str(key), _named(key, where))
        await archive_row(connection, row["id"], "rewritten")
    meta = session.meta.current_schema()
    meta_text = meta.to_json()
    created = await connection.fetchrow(
        UPSERT_ROW,
        *row_columns(scope, key, meta, meta_text),
        utc_now(),
        line_bytes(meta_text),
    )
    assert created is not None
    encoded = [message.to_json() for message in session.messages]
    inserted = await connection.fetch(
        INSERT_MESSAGES, created["id"], 0, [fingerprint(text) for text in encoded], encoded
    )
    size = sum(line_bytes(encoded[record["seq"]]) for record in inserted)
    await connection.execute(COUNT_APPENDED, created["id"], len(encoded), len(inserted), size)


async def archive_live(connection: Connection, scope: str, key: SessionKey) -> int | None:
    """Stamp the live row archived (in a transaction); its id, None when there was none."""
    row = await connection.fetchrow(LIVE_ROW + " FOR UPDATE", scope, str(key))
    if row is None:
        return None
    await archive_row(connection, row["id"], "archived")
    session_id: int = row["id"]
    return session_id


async def archive_row(connection: Connection, session_id: int, reason: str) -> None:
    await connection.execute(
        "UPDATE octos_sessions SET archived_at = now(), archive_reason = $2 WHERE id = $1",
        session_id,
        reason,
    )


async def list_infos(
    connection: Connection, scope: str, base_key: str | None, where: str
) -> tuple[list[SessionInfo], list[str]]:
    """The live sessions' rows, and the keys skipped for a newer schema."""
    infos, skipped = [], []
    for row in await connection.fetch(LIST, scope, base_key):
        if row["schema_version"] > CURRENT_SCHEMA_VERSION:
            skipped.append(str(row["session_key"]))
            continue
        key = SessionKey.parse(row["session_key"])
        infos.append(
            SessionInfo(
                key=key,
                topic=key.topic(),
                message_count=row["message_count"],
                size=row["bytes"],
                updated_at=row["updated_at"],
                path=f"{where} octos_sessions id {row['id']}",
                title=row["title"],
                parent_key=row["parent_key"],
            )
        )
    return infos, skipped


async def list_scopes(connection: Connection) -> list[str]:
    rows = await connection.fetch(
        "SELECT DISTINCT scope FROM octos_sessions WHERE archived_at IS NULL ORDER BY scope"
    )
    return [str(row["scope"]) for row in rows]
