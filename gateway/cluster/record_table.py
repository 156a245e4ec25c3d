"""A table of the cluster's own records in PostgreSQL: its pool, its schema, its health.

`TurnRecords` (workers) and `DeliveryRecords` (ingress processes) each keep one table in the
sessions' database; this is what they share. The table is created at start-up in a transaction
under an advisory lock, so any number of processes may start at once.

Both tables keep their rows for `RECORD_RETENTION`, long past any redelivery or platform retry
they must recognise; older rows are deleted once an hour.

Both processes also see the files' table, created by either:

    octos_cluster_files  the bytes of each file of a reply, by SHA-256: written by the worker in
                         the transaction of the turn's row (`TurnRecords.keep_files`), read by
                         an ingress that does not share the worker's data directory before it
                         sends the reply; expired with the turn records

The delivery records' table is here too: what ingress processes know about each reply they
delivered.

    octos_cluster_deliveries  one row per (profile, outbound message id): the turn it answers,
                              whether it was delivered or given up on, the platform ids of the
                              messages it made (where the channel gives them), and when

An ingress writes the row after the platform took the reply (or the delivery layer gave up on
it) and before it acknowledges the outbound message. A reply offered again (the ingress died
after its record, its ack was lost, the worker published it again) finds the row and is
acknowledged without being sent again. The key is the outbound message's `Nats-Msg-Id`: the
turn id for a chat's reply, the turn id and stream sequence for the copy that answers a retried
HTTP request (sent to the request waiting now, not dropped as the first one's twin).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import ClassVar, Final

import asyncpg
import structlog

from sessions.errors import SessionError
from sessions.postgres.connect import DATABASE_ERRORS, close_pool, create_pool, database_error

#: Serialises concurrent start-ups creating the cluster's tables.
_LOCK: Final = 0x6F63746F7374
#: Tries of the schema's transaction when PostgreSQL ends a deadlock by cancelling it.
SCHEMA_ATTEMPTS: Final = 5


class RecordTable:
    """One process's pool on one database, with the table of `SCHEMA` created on `open()`."""

    SCHEMA: ClassVar[str]
    #: Deletes the rows older than its one parameter, a timestamp.
    EXPIRY: ClassVar[str]
    #: The settings of the pool's connections (a table may trade durability for speed).
    SERVER_SETTINGS: ClassVar[dict[str, str] | None] = None

    def __init__(self, dsn: str, *, pool_size: int = 4, connect_timeout_s: float = 10.0) -> None:
        self._dsn = dsn
        self._pool_size = pool_size
        self._connect_timeout_s = connect_timeout_s
        self._pool: asyncpg.Pool | None = None

    async def open(self) -> None:
        self._pool = await create_pool(
            self._dsn,
            max_size=self._pool_size,
            connect_timeout_s=self._connect_timeout_s,
            server_settings=self.SERVER_SETTINGS,
        )
        try:
            for attempt in range(1, SCHEMA_ATTEMPTS + 1):
                try:
                    async with self._pool.acquire() as connection, connection.transaction():
                        await connection.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
                        await connection.execute(self.SCHEMA)
                    break
                except asyncpg.DeadlockDetectedError:
                    # PostgreSQL chose this transaction to end a deadlock with a running
                    # process's writes; nothing of it was applied, so it may simply run again.
                    if attempt == SCHEMA_ATTEMPTS:
                        raise
                    log.info("cluster.schema_deadlock_retried", table=type(self).__name__)
                    await asyncio.sleep(0.1 * attempt)
        except DATABASE_ERRORS as error:
            await self.close()
            raise database_error(self._dsn, error) from error

    async def close(self) -> None:
        if self._pool is not None:
            await close_pool(self._pool)
            self._pool = None

    def _connected(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError(f"{type(self).__name__} used before open()")
        return self._pool

    async def ping(self) -> bool:
        """Whether the database answers now (for /readyz)."""
        try:
            await self._connected().fetchval("SELECT 1", timeout=5)
        except DATABASE_ERRORS:
            return False
        return True

    async def forget_older_than(self, age: timedelta) -> int:
        """Remove the rows older than `age` (`EXPIRY`); how many went."""
        cutoff = datetime.now(UTC) - age
        try:
            status = await self._connected().execute(self.EXPIRY, cutoff)
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        return int(status.rsplit(" ", 1)[1])


log = structlog.get_logger(__name__)

#: How long a record is kept: redeliveries and platform retries within it are recognised.
RECORD_RETENTION = timedelta(days=7)
RECORD_EXPIRY_INTERVAL_S = 3600.0


async def expire_records(
    table: str,
    forget_older_than: Callable[[timedelta], Awaitable[int]],
    stopping: asyncio.Event,
) -> None:
    """Until `stopping`: forget rows older than `RECORD_RETENTION`, then wait an interval."""
    stop = asyncio.create_task(stopping.wait(), name=f"record-expiry-stop:{table}")
    try:
        while not stopping.is_set():
            try:
                removed = await forget_older_than(RECORD_RETENTION)
            except SessionError as error:
                # The database is away: the next round tries again; nothing depends on it.
                log.warning("cluster.record_expiry_failed", table=table, error=str(error))
            else:
                log.debug("cluster.records_expired", table=table, removed=removed)
            await asyncio.wait({stop}, timeout=RECORD_EXPIRY_INTERVAL_S)
    finally:
        stop.cancel()


def start_record_expiry(
    tasks: asyncio.TaskGroup,
    table: str,
    forget_older_than: Callable[[timedelta], Awaitable[int]],
    stopping: asyncio.Event,
) -> None:
    """`expire_records` for `table` as a task of `tasks`, named after the table."""
    tasks.create_task(
        expire_records(table, forget_older_than, stopping), name=f"record-expiry:{table}"
    )


FILES_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS octos_cluster_files (
    sha256 text PRIMARY KEY,
    data bytea NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS octos_cluster_files_stored ON octos_cluster_files (stored_at);
"""

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS octos_cluster_deliveries (
    scope text NOT NULL,
    msg_id text NOT NULL,
    turn_id text NOT NULL,
    delivered boolean NOT NULL,
    platform_ids json NOT NULL,
    error text,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, msg_id)
);
CREATE INDEX IF NOT EXISTS octos_cluster_deliveries_recorded
    ON octos_cluster_deliveries (recorded_at);
"""


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    scope: str
    msg_id: str
    turn_id: str
    #: False: the delivery layer gave up on it (the reason is `error`).
    delivered: bool
    platform_ids: tuple[str, ...] = ()
    error: str | None = None


class DeliveryRecords(RecordTable):
    """The deliveries of one database (every profile's, by scope); one pool per process."""

    SCHEMA = _SCHEMA + FILES_SCHEMA
    EXPIRY = "DELETE FROM octos_cluster_deliveries WHERE recorded_at < $1"

    async def reply_file(self, sha256: str) -> bytes | None:
        """The bytes of a reply's file a worker kept (`octos_cluster_files`), or None."""
        try:
            data = await self._connected().fetchval(
                "SELECT data FROM octos_cluster_files WHERE sha256 = $1", sha256
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        return None if data is None else bytes(data)

    async def find(self, scope: str, msg_id: str) -> DeliveryRecord | None:
        """The record of an outbound message delivered (or given up on) before, or None."""
        try:
            row = await self._connected().fetchrow(
                "SELECT * FROM octos_cluster_deliveries WHERE scope = $1 AND msg_id = $2",
                scope,
                msg_id,
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        if row is None:
            return None
        return DeliveryRecord(
            scope=row["scope"],
            msg_id=row["msg_id"],
            turn_id=row["turn_id"],
            delivered=bool(row["delivered"]),
            platform_ids=tuple(json.loads(row["platform_ids"])),
            error=row["error"],
        )

    async def record(self, delivery: DeliveryRecord) -> None:
        """Write the record once; a second write of the same message keeps the first."""
        try:
            await self._connected().execute(
                """
                INSERT INTO octos_cluster_deliveries
                    (scope, msg_id, turn_id, delivered, platform_ids, error)
                VALUES ($1, $2, $3, $4, $5::json, $6)
                ON CONFLICT (scope, msg_id) DO NOTHING
                """,
                delivery.scope,
                delivery.msg_id,
                delivery.turn_id,
                delivery.delivered,
                json.dumps(list(delivery.platform_ids)),
                delivery.error,
            )
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
