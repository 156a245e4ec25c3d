"""What a worker knows about each inbound message, in PostgreSQL: the exactly-once record.

    octos_cluster_turns  one row per (profile, inbound id): the turn's id, the stream sequence
                         of the copy that first claimed it, and once answered the reply and
                         the session messages it adds (one transaction); or, for a message
                         answered by no reply of its own, why (`settled`): joined into
                         another message's turn (`collect`, or an edit whose text that turn
                         took; `turn_id` is that turn's), dropped by a stop, an interrupt or
                         its sender's delete (`deleted`: the delete's row too), an edit or a
                         delete that changed nothing (`ignored`), or an owner's send cancelled

A redelivery of the same stream message finds the row: with a reply, the reply is re-published
(its `Nats-Msg-Id` is the turn id, so JetStream drops a copy it already has) rather than
recomputed; without one, the turn runs again. A platform's retry that JetStream's duplicate
window no longer catches is a new stream message with a known inbound id: dropped, or for a
channel that holds a request open for it (the HTTP API) answered with the stored reply.

    octos_cluster_taps   one row per (profile, channel, chat, bot message) whose buttons were
                         tapped, with `buttons_single_use`: the turn of the tap that claimed
                         them (`claim_tap`); a later tap on them, taken by any worker, finds
                         the row and is answered "already answered"; expired with the turns

A command's reply is stored in the transaction of its effect (a topic switched, a session
forked: `answer(..., connection=...)`), so a worker killed between the two leaves neither and
the redelivery runs the command once. Should another worker have answered the message meanwhile
(its copy redelivered while this one ran), `AnsweredElsewhere` rolls this one's effect back.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, Literal

import asyncpg

from bus import Message, OutboundMessage, new_turn_id
from gateway.cluster.record_table import FILES_SCHEMA, RecordTable
from sessions.postgres.connect import DATABASE_ERRORS, database_error

if TYPE_CHECKING:
    from sessions.postgres.connect import Connection

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS octos_cluster_turns (
    scope text NOT NULL,
    inbound_id text NOT NULL,
    turn_id text NOT NULL,
    first_seq bigint NOT NULL,
    session_key text,
    reply json,
    messages json,
    appended boolean NOT NULL DEFAULT false,
    settled text,
    received_at timestamptz NOT NULL DEFAULT now(),
    answered_at timestamptz,
    PRIMARY KEY (scope, inbound_id)
);
CREATE INDEX IF NOT EXISTS octos_cluster_turns_received ON octos_cluster_turns (received_at);
CREATE TABLE IF NOT EXISTS octos_cluster_taps (
    scope text NOT NULL,
    channel text NOT NULL,
    chat_id text NOT NULL,
    message_id text NOT NULL,
    turn_id text NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, channel, chat_id, message_id)
);
CREATE INDEX IF NOT EXISTS octos_cluster_taps_claimed ON octos_cluster_taps (claimed_at);
DO $$ BEGIN
    -- Only a table from before `settled` needs the ALTER: it locks the table out, running
    -- workers' transactions included, even when the column is there already.
    IF NOT EXISTS (
        SELECT 1 FROM information_schema.columns
        WHERE table_name = 'octos_cluster_turns' AND column_name = 'settled'
    ) THEN
        ALTER TABLE octos_cluster_turns ADD COLUMN settled text;
    END IF;
END $$;
"""
#: An outcome's transaction on the table's own pool waits for the disk, as the sessions' do.
_DURABLE: Final = "SET LOCAL synchronous_commit TO on"
#: Why a message has no reply of its own (`TurnRecord.settled`).
JOINED: Final = "joined"
Settled = Literal["joined", "stop", "interrupt", "cancelled", "deleted", "ignored"]


@dataclass(frozen=True, slots=True)
class TurnRecord:
    scope: str
    inbound_id: str
    turn_id: str
    first_seq: int
    session_key: str | None = None
    reply: OutboundMessage | None = None
    messages: tuple[Message, ...] = ()
    appended: bool = False
    settled: str | None = None

    @property
    def answered(self) -> bool:
        return self.reply is not None

    @property
    def done(self) -> bool:
        """Answered, or settled without a reply of its own: never to run again."""
        return self.reply is not None or self.settled is not None


class AnsweredElsewhere(Exception):
    """The message was answered by another worker while this one ran it: the transaction this
    reply was to join must not commit (its effect would be the command's second)."""

    def __init__(self, stored: TurnRecord) -> None:
        super().__init__(f"turn {stored.turn_id} was answered by another worker")
        self.stored = stored


def _record(row: asyncpg.Record) -> TurnRecord:
    reply = row["reply"]
    messages = row["messages"]
    return TurnRecord(
        scope=row["scope"],
        inbound_id=row["inbound_id"],
        turn_id=row["turn_id"],
        first_seq=int(row["first_seq"]),
        session_key=row["session_key"],
        reply=None if reply is None else OutboundMessage.model_validate_json(reply),
        messages=tuple(Message.model_validate(item) for item in json.loads(messages or "[]")),
        appended=bool(row["appended"]),
        settled=row["settled"],
    )


class TurnRecords(RecordTable):
    """The table of one database (every profile's rows, by scope); one pool per process."""

    SCHEMA = _SCHEMA + FILES_SCHEMA
    #: Answered rows expire, and the files and used buttons kept as long (a file kept again is
    #: kept anew); an unanswered row is still to do.
    EXPIRY = """
        WITH files AS (DELETE FROM octos_cluster_files WHERE stored_at < $1),
            taps AS (DELETE FROM octos_cluster_taps WHERE claimed_at < $1)
        DELETE FROM octos_cluster_turns WHERE answered_at < $1
    """
    #: A claim (and the `appended` mark) need not wait for the disk: a claim the database
    #: lost in a crash is made again by the redelivery, and an outcome's synchronous commit
    #: makes every earlier one of the database durable with it. An outcome stored here
    #: (`settle`, `answer` on a connection of this pool) commits synchronously (`_DURABLE`).
    SERVER_SETTINGS: ClassVar[dict[str, str] | None] = {"synchronous_commit": "off"}

    async def claim(self, scope: str, inbound_id: str, stream_seq: int) -> TurnRecord:
        """The message's row: created by the first copy to arrive, found by every later one."""
        try:
            row = await self._connected().fetchrow(
                """
                WITH created AS (
                    INSERT INTO octos_cluster_turns (scope, inbound_id, turn_id, first_seq)
                    VALUES ($1, $2, $3, $4)
                    ON CONFLICT (scope, inbound_id) DO NOTHING
                    RETURNING *
                )
                SELECT * FROM created
                UNION ALL
                SELECT * FROM octos_cluster_turns WHERE scope = $1 AND inbound_id = $2
                LIMIT 1
                """,
                scope,
                inbound_id,
                str(new_turn_id()),
                stream_seq,
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        assert row is not None
        return _record(row)

    async def claim_tap(
        self, record: TurnRecord, channel: str, chat_id: str, message_id: str
    ) -> bool:
        """Claim the buttons of the bot message `message_id` for `record`'s turn: True when
        this turn holds them (claimed now, or by an earlier delivery of the same turn), False
        when another turn's tap used them first."""
        try:
            holder = await self._connected().fetchval(
                """
                WITH created AS (
                    INSERT INTO octos_cluster_taps (scope, channel, chat_id, message_id, turn_id)
                    VALUES ($1, $2, $3, $4, $5)
                    ON CONFLICT (scope, channel, chat_id, message_id) DO NOTHING
                    RETURNING turn_id
                )
                SELECT turn_id FROM created
                UNION ALL
                SELECT turn_id FROM octos_cluster_taps
                WHERE scope = $1 AND channel = $2 AND chat_id = $3 AND message_id = $4
                LIMIT 1
                """,
                record.scope,
                channel,
                chat_id,
                message_id,
                record.turn_id,
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        return bool(holder == record.turn_id)

    async def known(self, scope: str, inbound_ids: list[str]) -> set[str]:
        """Which of `inbound_ids` have a row already (a retry of a message seen before)."""
        try:
            rows = await self._connected().fetch(
                "SELECT inbound_id FROM octos_cluster_turns "
                "WHERE scope = $1 AND inbound_id = ANY($2::text[])",
                scope,
                inbound_ids,
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        return {row["inbound_id"] for row in rows}

    async def answer(
        self,
        record: TurnRecord,
        session_key: str,
        reply: OutboundMessage,
        messages: list[Message],
        *,
        joined: Sequence[tuple[str, int]] = (),
        connection: Connection | None = None,
        appended: bool = False,
    ) -> TurnRecord:
        """Store the reply and the session messages of the turn, and the rows of the messages
        `joined` into it (inbound id, stream sequence), in one transaction (on `connection`, in
        the caller's, when given); when a reply is already there (another worker answered
        first), that one is returned, or with `connection` raised as `AnsweredElsewhere`.
        `appended`: the caller's transaction appends the messages to the session too."""
        payload = json.dumps([message.model_dump(mode="json") for message in messages])
        try:
            async with self._transaction(connection) as on:
                row = await on.fetchrow(
                    """
                    UPDATE octos_cluster_turns
                    SET session_key = $3, reply = $4::json, messages = $5::json,
                        appended = $6, answered_at = now()
                    WHERE scope = $1 AND inbound_id = $2 AND reply IS NULL AND settled IS NULL
                    RETURNING *
                    """,
                    record.scope,
                    record.inbound_id,
                    session_key,
                    reply.model_dump_json(),
                    payload,
                    appended,
                )
                stored = row is not None
                row = await _closed_row(on, record, row, JOINED, joined)
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        if not stored and connection is not None:
            raise AnsweredElsewhere(_record(row))
        return _record(row)

    @asynccontextmanager
    async def _transaction(self, connection: Connection | None) -> AsyncIterator[Connection]:
        """`connection`, in the caller's transaction already, or one of the pool's in a
        transaction of its own while the block runs."""
        if connection is not None:
            yield connection
            return
        async with self._connected().acquire() as acquired, acquired.transaction():
            await acquired.execute(_DURABLE)
            yield acquired

    async def settle(
        self, record: TurnRecord, reason: Settled, *, joined: Sequence[tuple[str, int]] = ()
    ) -> TurnRecord:
        """Close the message (and those `joined` into its turn) without a reply: a stop or
        an interrupt dropped it. A row answered meanwhile keeps its reply."""
        try:
            async with self._connected().acquire() as connection, connection.transaction():
                await connection.execute(_DURABLE)
                row = await connection.fetchrow(
                    """
                    UPDATE octos_cluster_turns SET settled = $3, answered_at = now()
                    WHERE scope = $1 AND inbound_id = $2 AND reply IS NULL AND settled IS NULL
                    RETURNING *
                    """,
                    record.scope,
                    record.inbound_id,
                    reason,
                )
                row = await _closed_row(connection, record, row, reason, joined)
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        return _record(row)

    async def keep_files(self, connection: Connection, files: Sequence[tuple[str, bytes]]) -> None:
        """Keep the bytes of a reply's files (SHA-256, bytes) in the caller's transaction, for
        the ingresses that do not share this worker's data directory."""
        if not files:
            return
        try:
            await connection.executemany(
                """
                INSERT INTO octos_cluster_files (sha256, data) VALUES ($1, $2)
                ON CONFLICT (sha256) DO UPDATE SET stored_at = now()
                """,
                files,
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error

    async def mark_appended(self, record: TurnRecord) -> None:
        """The session holds the turn's messages (a later redelivery need not append them)."""
        try:
            await self._connected().execute(
                "UPDATE octos_cluster_turns SET appended = true "
                "WHERE scope = $1 AND inbound_id = $2",
                record.scope,
                record.inbound_id,
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error


async def _closed_row(
    connection: Connection,
    record: TurnRecord,
    updated: asyncpg.Record | None,
    reason: str,
    joined: Sequence[tuple[str, int]],
) -> asyncpg.Record:
    """`record`'s row after an UPDATE that closes it: when that took (`updated`), the messages
    `joined` into its turn are closed with it, as `reason`; when the row was closed before
    (answered or settled elsewhere), the row as that left it."""
    if updated is None:
        return await _row_of(connection, record)
    await _settle_joined(connection, record, reason, joined)
    return updated


async def _row_of(connection: Connection, record: TurnRecord) -> asyncpg.Record:
    row = await connection.fetchrow(
        "SELECT * FROM octos_cluster_turns WHERE scope = $1 AND inbound_id = $2",
        record.scope,
        record.inbound_id,
    )
    assert row is not None
    return row


async def _settle_joined(
    connection: Connection,
    record: TurnRecord,
    reason: str,
    joined: Sequence[tuple[str, int]],
) -> None:
    """Rows for the messages joined into `record`'s turn, under its turn id: when delivered
    later, each is recognised as done and acknowledged without a turn."""
    if not joined:
        return
    await connection.executemany(
        """
        INSERT INTO octos_cluster_turns
            (scope, inbound_id, turn_id, first_seq, settled, answered_at)
        VALUES ($1, $2, $3, $4, $5, now())
        ON CONFLICT (scope, inbound_id) DO NOTHING
        """,
        [(record.scope, inbound_id, record.turn_id, seq, reason) for inbound_id, seq in joined],
    )
