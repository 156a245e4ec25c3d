"""Old records go: a table's rows past their retention are deleted once an hour.

The turn records (workers) and the delivery records (ingress processes) are kept for
`RECORD_RETENTION`, long past any redelivery or platform retry they must recognise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

import structlog

from sessions.errors import SessionError

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
