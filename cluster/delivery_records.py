"""What ingress processes know about each reply they delivered, in PostgreSQL.

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

import json
from dataclasses import dataclass
from typing import Final

from cluster.record_table import RecordTable
from sessions.postgres.connect import DATABASE_ERRORS, database_error

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

    SCHEMA = _SCHEMA
    EXPIRY = "DELETE FROM octos_cluster_deliveries WHERE recorded_at < $1"

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
