"""A table of the cluster's own records in PostgreSQL: its pool, its schema, its health.

`TurnRecords` (workers) and `DeliveryRecords` (ingress processes) each keep one table in the
sessions' database; this is what they share. The table is created at start-up in a transaction
under an advisory lock, so any number of processes may start at once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import ClassVar, Final

import asyncpg

from sessions.postgres.connect import DATABASE_ERRORS, close_pool, create_pool, database_error

#: Serialises concurrent start-ups creating the cluster's tables.
_LOCK: Final = 0x6F63746F7374


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
            async with self._pool.acquire() as connection, connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
                await connection.execute(self.SCHEMA)
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
