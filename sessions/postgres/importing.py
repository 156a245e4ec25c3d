"""Copying one session file into PostgreSQL, once: `octos-gateway store migrate`.

Each file is copied in one transaction that also records it in `octos_migrated_files`, so a
run that is killed leaves every file either copied and recorded or untouched, and the next run
skips what is recorded: resumable and idempotent. A live file that grew since it was copied (a
daemon still ran on the files) has its new messages appended to its copy, so a migration run
while the daemon runs is finished by a second run once it is stopped. A live session that
PostgreSQL holds already (written by a daemon running on PostgreSQL) is left alone and reported
as a conflict.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from bus.message import utc_now
from sessions.meta import SessionMeta
from sessions.postgres.queries import (
    COUNT_APPENDED,
    INSERT_MESSAGES,
    LIVE_ROW,
    fingerprint,
    line_bytes,
    row_columns,
)
from sessions.session import Session

if TYPE_CHECKING:
    from sessions.postgres.connect import Connection

_INSERT_ROW = """
INSERT INTO octos_sessions (scope, session_key, base_key, topic, schema_version, meta, title,
                            parent_key, created_at, updated_at, bytes, archived_at,
                            archive_reason)
VALUES ($1, $2, $3, $4, $5, $6::json, $7, $8, $9, $10, $11, $12, $13)
RETURNING id
"""


# What one session's copy came to, and how many messages it wrote.
class Copied(StrEnum):
    COPIED = "copied"
    CAUGHT_UP = "new messages copied"
    ALREADY = "already copied"
    CONFLICT = "exists in PostgreSQL already"
    UNMATCHED = "changed since its copy (its copy's last message is no longer in the file)"


@dataclass(frozen=True, slots=True)
class Imported:
    outcome: Copied
    messages: int = 0  # messages written to PostgreSQL by this call


async def import_session(
    connection: Connection,
    scope: str,
    source: str,
    session: Session,
    *,
    archived: str | None = None,
) -> Imported:
    """Copy `session` (read from the file `source`) unless done; `archived` gives its reason."""
    key = session.key
    async with connection.transaction():
        # Two runs at once copy each file once: the second waits for the first to commit.
        await connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", source)
        done = await connection.fetchrow(
            "SELECT session_id, messages FROM octos_migrated_files WHERE source = $1", source
        )
        if done is not None:
            if archived is not None:
                return Imported(Copied.ALREADY)
            return await _catch_up(connection, source, session, done["session_id"])
        if archived is None and await connection.fetchrow(LIVE_ROW, scope, str(key)):
            return Imported(Copied.CONFLICT)
        meta: SessionMeta = session.meta.current_schema()
        meta_text = meta.to_json()
        updated = session.messages[-1].timestamp if session.messages else meta.updated_at
        session_id = await connection.fetchval(
            _INSERT_ROW,
            *row_columns(scope, key, meta, meta_text),
            max(updated, meta.updated_at),
            line_bytes(meta_text),
            None if archived is None else utc_now(),
            archived,
        )
        encoded = [message.to_json() for message in session.messages]
        inserted = await connection.fetch(
            INSERT_MESSAGES, session_id, 0, [fingerprint(text) for text in encoded], encoded
        )
        size = sum(line_bytes(encoded[record["seq"]]) for record in inserted)
        await connection.execute(COUNT_APPENDED, session_id, len(encoded), len(inserted), size)
        await connection.execute(
            "INSERT INTO octos_migrated_files (source, scope, session_key, session_id, messages) "
            "VALUES ($1, $2, $3, $4, $5)",
            source,
            scope,
            str(key),
            session_id,
            len(session.messages),
        )
    return Imported(Copied.COPIED, len(inserted))


async def _catch_up(
    connection: Connection, source: str, session: Session, session_id: int
) -> Imported:
    """Append what the file gained after the copy's last message, if the copy is still live.

    The copy's last message is looked up in the file by fingerprint: what follows it is new. If
    the file no longer holds it (compacted since), nothing is guessed: a problem is reported.
    """
    live = await connection.fetchrow(
        "SELECT next_seq, (SELECT fingerprint FROM octos_messages WHERE session_id = $1 "
        "ORDER BY seq DESC LIMIT 1) AS last FROM octos_sessions "
        "WHERE id = $1 AND archived_at IS NULL FOR UPDATE",
        session_id,
    )
    if live is None:  # archived in PostgreSQL since: the file's news have no session to join
        return Imported(Copied.ALREADY)
    encoded = [message.to_json() for message in session.messages]
    prints = [fingerprint(text) for text in encoded]
    start = 0
    if live["last"] is not None:
        if live["last"] not in prints:
            return Imported(Copied.UNMATCHED)
        start = len(prints) - prints[::-1].index(live["last"])
    if start == len(encoded):
        return Imported(Copied.ALREADY)
    first: int = live["next_seq"]
    inserted = await connection.fetch(
        INSERT_MESSAGES, session_id, first, prints[start:], encoded[start:]
    )
    size = sum(line_bytes(encoded[start + record["seq"] - first]) for record in inserted)
    await connection.execute(COUNT_APPENDED, session_id, len(encoded) - start, len(inserted), size)
    await connection.execute(
        "UPDATE octos_migrated_files SET messages = $2, migrated_at = now() WHERE source = $1",
        source,
        len(session.messages),
    )
    return Imported(Copied.CAUGHT_UP, len(inserted))
