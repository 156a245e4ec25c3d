"""The owner's sends in a cluster: `POST /v1/messages` on any process, sent once, in order.

One process keeps a send in its journal (`gateway.turn.outbox`); a cluster keeps it in PostgreSQL
and sends it through the chat's inbound partition, so that it takes its place among the chat's
turns as a user's message does:

    octos_cluster_sends  one row per send: who asked (profile, idempotency key), what (channel,
                         chat, text, whether the session gains it), when (taken, due), where it
                         stands (scheduled, queued, cancelled, failed), when it was published to
                         the inbound stream, and the turn id its reply was recorded under

A POST is answered 202 once its row is committed (synchronously: durable): the row is the send.
One due now is then published by the process that took it, to the inbound partition of its chat
(`Nats-Msg-Id` = the send's id, header `Octos-Send`), and marked published. Every worker runs
`publish_due`: it claims the rows that are due and not published (`FOR UPDATE SKIP LOCKED`, so
each goes out from one worker), publishes them, and marks them: a scheduled send goes out when its
time comes from whichever worker is alive, and one whose process died between its row and its
publish goes out from another (after `UNPUBLISHED_GRACE_S`). A send published twice (a process
killed between the publish and the mark) is one stream message within JetStream's duplicate
window, and one turn beyond it: the worker claims its row in `octos_cluster_turns` by the send's
id (`gateway.cluster.worker`).

The worker that takes a send from the partition records it as a turn's outcome: the send's
`turn_id`, the turn's row with its reply and, with `session: append`, the text in the chat's
current session as the assistant's, in one transaction; then the reply is published to the
outbound stream and delivered as any reply is, under the one retry policy, recorded in
`octos_cluster_deliveries` (a platform's refusal kept as a dead letter, `gateway.cluster.delivery`).
That record is the send's end: `GET` reads the row with its delivery's record, so `sent` and
the platform ids (or `failed` and the platform's reason) are answered from any process. `DELETE`
cancels a row no turn has taken yet; a worker that takes a cancelled send settles it unsent.

An idempotency key names one send of a profile for 24 hours: the row is found by it, and a
retry is answered with the first answer; two processes taking the same key at once meet at the
row's unique index.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import asyncpg
import structlog
from nats.js import JetStreamContext

from bus import InboundMessage, new_turn_id
from gateway.cluster.codec import InboundEnvelope
from gateway.cluster.connection import NATS_ERRORS, REQUEST_TIMEOUT_S
from gateway.cluster.record_table import DeliveryRecords, RecordTable
from gateway.cluster.streams import ClusterNames
from gateway.turn.journal import OwnerSend
from gateway.turn.journal.records import SendStatus
from gateway.turn.outbox import Cancelled, SendRequest, first_status, log_taken
from sessions.errors import SessionError
from sessions.postgres.connect import DATABASE_ERRORS, database_error

if TYPE_CHECKING:
    from sessions.postgres.connect import Connection

log = structlog.get_logger(__name__)

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS octos_cluster_sends (
    id text PRIMARY KEY,
    scope text NOT NULL,
    idempotency_key text,
    channel text NOT NULL,
    chat_id text NOT NULL,
    text text NOT NULL,
    append boolean NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT now(),
    due timestamptz,
    status text NOT NULL,
    error text,
    published_at timestamptz,
    turn_id text,
    ended_at timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS octos_cluster_sends_key
    ON octos_cluster_sends (scope, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS octos_cluster_sends_unpublished
    ON octos_cluster_sends (due) WHERE published_at IS NULL;
"""
_DURABLE: Final = "SET LOCAL synchronous_commit TO on"
#: A row with the delivery record of its reply, if there is one yet.
_WITH_DELIVERY: Final = """
SELECT s.*, d.delivered, d.platform_ids, d.error AS delivery_error, d.recorded_at
FROM octos_cluster_sends s
LEFT JOIN octos_cluster_deliveries d ON d.scope = s.scope AND d.msg_id = s.turn_id
"""
#: An idempotency key names one send this long.
KEY_HOURS: Final = 24
#: A send due at once is published by the process that took it; a worker publishes it only
#: when it is still unpublished this long after (that process died in between).
UNPUBLISHED_GRACE_S: Final = 5.0
#: How often a worker looks for due sends when none is due sooner: another process may have
#: taken one since.
DUE_POLL_S: Final = 1.0
#: The most sends one round of `publish_due` claims.
DUE_BATCH: Final = 100


class SendRecords(RecordTable):
    """The sends of one database (every profile's, by scope); one pool per process."""

    #: The deliveries' table too: a send's status reads its reply's record, and a worker may
    #: answer a GET before any ingress has created that table.
    SCHEMA = DeliveryRecords.SCHEMA + _SCHEMA
    #: A send that ended (its turn recorded, or cancelled) is forgotten after the retention;
    #: one still to send is kept, however far ahead.
    EXPIRY = "DELETE FROM octos_cluster_sends WHERE ended_at < $1"

    @asynccontextmanager
    async def _durable(self) -> AsyncIterator[Connection]:
        try:
            async with self._connected().acquire() as connection, connection.transaction():
                await connection.execute(_DURABLE)
                yield connection
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error

    async def take(self, profile: str, request: SendRequest) -> tuple[OwnerSend, bool]:
        """The send `request` asks for, committed; True when its key named an earlier one."""
        due = request.send_at
        async with self._durable() as on:
            if request.idempotency_key is not None:
                # A key older than its 24 hours names nothing: the new send takes it.
                await on.execute(
                    "UPDATE octos_cluster_sends SET idempotency_key = NULL WHERE scope = $1 "
                    f"AND idempotency_key = $2 AND taken_at < now() - interval '{KEY_HOURS} hours'",
                    profile,
                    request.idempotency_key,
                )
            row = await on.fetchrow(
                """
                INSERT INTO octos_cluster_sends
                    (id, scope, idempotency_key, channel, chat_id, text, append, due, status)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
                        CASE WHEN $8::timestamptz > now() THEN 'scheduled' ELSE 'queued' END)
                ON CONFLICT (scope, idempotency_key) WHERE idempotency_key IS NOT NULL
                DO NOTHING
                RETURNING *
                """,
                f"msg_{new_turn_id().replace('-', '')}",
                profile,
                request.idempotency_key,
                request.channel,
                request.chat_id,
                request.text,
                request.session == "append",
                due,
            )
            if row is not None:
                return _send(row), False
            earlier = await on.fetchrow(
                _WITH_DELIVERY + " WHERE s.scope = $1 AND s.idempotency_key = $2",
                profile,
                request.idempotency_key,
            )
        assert earlier is not None
        return _send(earlier), True

    async def find(self, profile: str, send_id: str) -> OwnerSend | None:
        try:
            row = await self._connected().fetchrow(
                _WITH_DELIVERY + " WHERE s.scope = $1 AND s.id = $2", profile, send_id
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        return None if row is None else _send(row)

    async def listed(self, profile: str) -> list[OwnerSend]:
        try:
            rows = await self._connected().fetch(
                _WITH_DELIVERY + " WHERE s.scope = $1 ORDER BY s.taken_at", profile
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        return [_send(row) for row in rows]

    async def cancel(self, profile: str, send_id: str) -> Cancelled:
        async with self._durable() as on:
            row = await on.fetchrow(
                """
                UPDATE octos_cluster_sends SET status = 'cancelled', ended_at = now()
                WHERE scope = $1 AND id = $2 AND status IN ('scheduled', 'queued')
                    AND turn_id IS NULL
                RETURNING status
                """,
                profile,
                send_id,
            )
            if row is None:
                row = await on.fetchrow(
                    "SELECT status FROM octos_cluster_sends WHERE scope = $1 AND id = $2",
                    profile,
                    send_id,
                )
        if row is None:
            return "not_found"
        return "cancelled" if row["status"] == "cancelled" else "too_late"

    async def published(self, send_id: str) -> None:
        """The send is in its chat's partition (no worker needs to publish it)."""
        try:
            await self._connected().execute(
                "UPDATE octos_cluster_sends SET published_at = now(), status = 'queued' "
                "WHERE id = $1 AND published_at IS NULL AND status = 'queued'",
                send_id,
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error

    async def publish_due(
        self, publish: Callable[[OwnerSend, str], Awaitable[None]]
    ) -> float | None:
        """Publish the sends that are due and unpublished (`publish(send, profile)`), each
        marked in the transaction that claimed it; the seconds until the next one is due."""
        async with self._durable() as on:
            rows = await on.fetch(
                f"""
                SELECT * FROM octos_cluster_sends
                WHERE published_at IS NULL AND status IN ('scheduled', 'queued')
                    AND coalesce(due, taken_at + interval '{UNPUBLISHED_GRACE_S} seconds')
                        <= now()
                ORDER BY coalesce(due, taken_at)
                LIMIT {DUE_BATCH}
                FOR UPDATE SKIP LOCKED
                """
            )
            published = 0
            for row in rows:
                send = _send(row)
                try:
                    await publish(send, row["scope"])
                except NATS_ERRORS as error:
                    # Caught here, not by the transaction's database handling: the sends
                    # marked so far commit, this one and the rest wait for the next round.
                    log.warning(
                        "cluster.send_not_published",
                        id=send.id,
                        error=str(error) or type(error).__name__,
                        detail="published in a later round",
                    )
                    break
                await on.execute(
                    "UPDATE octos_cluster_sends SET published_at = now(), status = 'queued' "
                    "WHERE id = $1",
                    send.id,
                )
                published += 1
            if published:
                log.info("cluster.sends_published", sends=published)
            wait = await on.fetchval(
                """
                SELECT extract(epoch FROM min(due) - now()) FROM octos_cluster_sends
                WHERE published_at IS NULL AND status = 'scheduled'
                """
            )
        return None if wait is None else max(0.0, float(wait))

    async def start(
        self, profile: str, send_id: str, turn_id: str, connection: Connection
    ) -> OwnerSend | None:
        """Mark the send taken by `turn_id`, in the caller's transaction (the turn's outcome
        commits with it); None when it was cancelled (or is gone)."""
        row = await connection.fetchrow(
            """
            UPDATE octos_cluster_sends SET turn_id = $3, status = 'queued', ended_at = now()
            WHERE scope = $1 AND id = $2 AND status <> 'cancelled'
                AND (turn_id IS NULL OR turn_id = $3)
            RETURNING *
            """,
            profile,
            send_id,
            turn_id,
        )
        return None if row is None else _send(row)

    async def failed(self, profile: str, send_id: str, reason: str) -> None:
        """The send's message went to the dead letters without a turn: it will not be sent."""
        try:
            await self._connected().execute(
                "UPDATE octos_cluster_sends SET status = 'failed', error = $3, ended_at = now() "
                "WHERE scope = $1 AND id = $2 AND turn_id IS NULL",
                profile,
                send_id,
                reason,
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error


def _send(row: asyncpg.Record) -> OwnerSend:
    """The row as the single process's `OwnerSend`, its status its delivery's when it has one."""
    due: datetime | None = row["due"]
    status: SendStatus = row["status"]
    platform_ids: list[str] = []
    error: str | None = row["error"]
    ended: datetime | None = row["ended_at"]
    delivered = row.get("delivered")
    if delivered is not None:
        status = "sent" if delivered else "failed"
        platform_ids = list(json.loads(row["platform_ids"]))
        error = None if delivered else row["delivery_error"]
        ended = row["recorded_at"]
    elif row["turn_id"] is not None:
        status, ended = "queued", None  # recorded as a turn, its delivery still to come
    return OwnerSend(
        id=row["id"],
        channel=row["channel"],
        chat_id=row["chat_id"],
        text=row["text"],
        at=row["taken_at"].timestamp(),
        due=None if due is None else due.timestamp(),
        key=row["idempotency_key"],
        append=row["append"],
        status=status,
        turn=row["turn_id"],
        platform_ids=platform_ids,
        error=error,
        ended_at=None if ended is None else ended.timestamp(),
    )


def send_envelope(profile: str, send: OwnerSend) -> InboundEnvelope:
    """The send as its chat's partition carries it: its text as the content, its id as the
    inbound id (the worker's turn row is claimed by it) and in `Octos-Send`."""
    message = InboundMessage(
        channel=send.channel,
        sender_id="owner",
        chat_id=send.chat_id,
        content=send.text,
        timestamp=datetime.fromtimestamp(send.at, UTC),
    )
    return InboundEnvelope(profile, send.id, message, send=send.id)


async def publish_send(
    js: JetStreamContext, names: ClusterNames, profile: str, send: OwnerSend
) -> None:
    """Into the inbound partition of its chat, behind what the chat has there already."""
    envelope = send_envelope(profile, send)
    partition = names.partition_of_chat(profile, envelope.message)
    await js.publish(
        names.inbound_subject(partition),
        envelope.body(),
        timeout=REQUEST_TIMEOUT_S,
        stream=names.inbound_stream,
        headers=envelope.headers(send.id),
    )


@dataclass(eq=False)
class ClusterOutbox:
    """A profile's sends as `/v1/messages` sees them on this process: the same answers as one
    process's `Outbox`, from the cluster's table."""

    profile: str
    sends: SendRecords
    js: JetStreamContext
    names: ClusterNames
    _: KW_ONLY
    knows_channel: Callable[[str], bool]

    async def take(self, request: SendRequest) -> tuple[OwnerSend, str]:
        send, earlier = await self.sends.take(self.profile, request)
        if earlier:
            return send, first_status(send)
        log_taken(self.profile, send)
        if send.status == "queued":
            await self._publish_now(send)
        return send, send.status

    async def _publish_now(self, send: OwnerSend) -> None:
        """Durable already: a publish or mark that fails is left to the workers' rounds."""
        try:
            await publish_send(self.js, self.names, self.profile, send)
        except NATS_ERRORS as error:
            log.warning(
                "cluster.send_not_published",
                id=send.id,
                error=str(error) or type(error).__name__,
                detail=f"a worker publishes it within {UNPUBLISHED_GRACE_S:g} s",
            )
            return
        try:
            await self.sends.published(send.id)
        except SessionError as error:
            # Published twice at worst: the stream or the worker's turn row drops the copy.
            log.warning("cluster.send_not_marked", id=send.id, error=str(error))

    async def find(self, send_id: str) -> OwnerSend | None:
        return await self.sends.find(self.profile, send_id)

    async def listed(self) -> list[OwnerSend]:
        return await self.sends.listed(self.profile)

    async def cancel(self, send_id: str) -> Cancelled:
        cancelled = await self.sends.cancel(self.profile, send_id)
        if cancelled == "cancelled":
            log.info("outbox.cancelled", profile=self.profile, id=send_id)
        return cancelled


async def publish_due_sends(
    sends: SendRecords, js: JetStreamContext, names: ClusterNames, stopping: asyncio.Event
) -> None:
    """A worker's part: until `stopping`, publish each send when it is due (or left unpublished
    by the process that took it)."""

    async def publish(send: OwnerSend, profile: str) -> None:
        await publish_send(js, names, profile, send)

    stop = asyncio.create_task(stopping.wait(), name="due-sends-stop")
    try:
        while not stopping.is_set():
            wait_s = DUE_POLL_S
            try:
                next_s = await sends.publish_due(publish)
            except SessionError as error:
                # The database is away: the next round tries again.
                log.warning("cluster.due_sends_failed", error=str(error) or type(error).__name__)
            else:
                if next_s is not None:
                    wait_s = min(wait_s, next_s)
            await asyncio.wait({stop}, timeout=wait_s)
    finally:
        stop.cancel()
