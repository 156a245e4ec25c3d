"""Connecting to PostgreSQL, and the one error every connection failure becomes."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final, TypeAlias

import asyncpg

from config.store import redact_dsn
from sessions.errors import SessionError

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    #: A connection of its own or one lent by a pool: the store uses either alike.
    Connection: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]

#: Seconds any one statement may take before it is abandoned.
COMMAND_TIMEOUT_S: Final = 30.0
#: Every failure of the database or of the way to it (network, refused login, missing database).
DATABASE_ERRORS: Final = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


class StoreUnavailable(SessionError):
    """PostgreSQL cannot be reached or refused us; the message names the DSN (no password)."""

    def __init__(self, dsn: str, cause: BaseException) -> None:
        self.dsn = redact_dsn(dsn)
        self.cause = cause
        super().__init__(
            f"cannot use PostgreSQL at {self.dsn}: {_describe(cause)}; check that the server "
            "runs and accepts TCP connections there, that the user, password and database in "
            "gateway.yaml's store.dsn exist, and pg_hba.conf lets this host in"
        )


class StoreRefused(SessionError):
    """PostgreSQL is there but refused a statement (bad data, a constraint, permissions)."""

    def __init__(self, dsn: str, cause: BaseException) -> None:
        self.dsn = redact_dsn(dsn)
        self.cause = cause
        super().__init__(f"PostgreSQL at {self.dsn} refused the operation: {_describe(cause)}")


#: SQLSTATE classes meaning "the database cannot be used now" rather than "this was refused":
#: connection exceptions, invalid authorization, invalid catalog name, insufficient resources,
#: operator intervention (shutdown, restart).
_UNAVAILABLE_CLASSES = frozenset({"08", "28", "3D", "53", "57"})


def database_error(dsn: str, error: BaseException) -> SessionError:
    """The typed error for a failure of one of `DATABASE_ERRORS`."""
    if isinstance(error, asyncpg.PostgresError):
        state = str(getattr(error, "sqlstate", "") or "")
        if state[:2] not in _UNAVAILABLE_CLASSES:
            return StoreRefused(dsn, error)
    return StoreUnavailable(dsn, error)


def _describe(cause: BaseException) -> str:
    text = str(cause).strip() or type(cause).__name__
    if isinstance(cause, TimeoutError):
        text = "no answer before the connect timeout"
    return redact_dsn(text) if "://" in text else text


async def _returned_as_it_is(_connection: asyncpg.Connection) -> None:
    """A connection back in a pool needs no reset query (asyncpg's default costs a round
    trip per use): ours keep no session state. Every setting and advisory lock is taken for
    a transaction only, and LISTEN has a connection of its own. A transaction left open is
    still rolled back by asyncpg itself."""


async def create_pool(
    dsn: str,
    *,
    max_size: int,
    connect_timeout_s: float,
    server_settings: dict[str, str] | None = None,
) -> asyncpg.Pool:
    """A pool whose first connection is open (so an unreachable server fails here);
    `server_settings`: the sessions' settings of every connection of it."""
    try:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=1,
            max_size=max_size,
            timeout=connect_timeout_s,
            command_timeout=COMMAND_TIMEOUT_S,
            server_settings=server_settings,
            reset=_returned_as_it_is,
        )
    except DATABASE_ERRORS as error:
        raise database_error(dsn, error) from error
    assert pool is not None
    return pool


async def close_pool(pool: asyncpg.Pool, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
    """Close once every connection is back; cut them after `timeout_s`."""
    try:
        await asyncio.wait_for(pool.close(), timeout_s)
    except TimeoutError:
        pool.terminate()
