"""`PostgresSessionStore`: the sessions of one profile in PostgreSQL, same contract as the files.

Every append is one committed statement (`octos_append`: upsert the session row, one INSERT of
the batch, update its counters), so `sync()` has nothing left to do. Appends to one session
keep their call order (a per-session lock here, the session row's lock in the database across
processes).
`fork` and `rewrite` run in transactions; `archive` and `rewrite` stamp the old row archived and
keep its messages. A store opened `read_only` never creates or changes anything.

`transaction()` makes several operations one: every operation of the store in the task that
opened it (and in nothing else) joins it, so they commit or roll back together, with whatever
else the caller writes on its connection (a cluster worker: a command's effect and its reply).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING

import asyncpg
import structlog

from bus import Message, SessionKey
from config.store import redact_dsn
from sessions.concurrency import KeyedLocks
from sessions.errors import SessionError, SessionStoreClosed
from sessions.meta import SessionMeta, title_of
from sessions.postgres import queries
from sessions.postgres.connect import DATABASE_ERRORS, close_pool, create_pool, database_error
from sessions.postgres.schema import SCHEMA_VERSION, StoreSchemaTooNew, applied_version
from sessions.postgres.schema import ensure_schema as ensure_schema
from sessions.session import Session, SessionInfo
from sessions.store import AppendReceipt, StoreBase

if TYPE_CHECKING:
    from sessions.postgres.connect import Connection

log = structlog.get_logger(__name__)

#: The store transaction the current task is in, and its store (`PostgresSessionStore.transaction`).
_JOINED: ContextVar[tuple[PostgresSessionStore, Connection] | None] = ContextVar(
    "octos_store_transaction", default=None
)


@dataclass(eq=False)
class PostgresSessionStore(StoreBase):
    """The sessions of `scope` (the profile id) in the database at `dsn`: one database, many
    profiles."""

    #: Out of the repr: it may hold the password.
    dsn: str = field(repr=False)
    scope: str
    _: KW_ONLY
    read_only: bool = False
    pool_size: int = 4
    connect_timeout_s: float = 10.0
    _pool: asyncpg.Pool | None = field(default=None, init=False, repr=False)
    #: Whether the session tables exist (a read-only store may find none).
    _tables: bool = field(default=False, init=False, repr=False)
    _locks: KeyedLocks[SessionKey] = field(default_factory=KeyedLocks, init=False, repr=False)

    @property
    def where(self) -> str:
        """The database, password redacted, as messages name it."""
        return redact_dsn(self.dsn)

    # Lifecycle

    async def open(self) -> None:
        """Connect; create or migrate the schema (unless read-only). StoreUnavailable if not."""
        pool = await create_pool(
            self.dsn, max_size=self.pool_size, connect_timeout_s=self.connect_timeout_s
        )
        try:
            async with pool.acquire(timeout=self.connect_timeout_s) as connection:
                if self.read_only:
                    version = await applied_version(connection)
                    if version > SCHEMA_VERSION:
                        raise StoreSchemaTooNew(self.where, version)
                    self._tables = version > 0
                else:
                    await ensure_schema(connection, self.where)
                    self._tables = True
        except DATABASE_ERRORS as error:
            await close_pool(pool)
            raise database_error(self.dsn, error) from error
        except BaseException:
            await close_pool(pool)
            raise
        self._pool = pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await close_pool(pool)

    @property
    def has_tables(self) -> bool:
        """Whether the schema exists (a read-only store may find a database nobody set up)."""
        return self._tables

    @asynccontextmanager
    async def connection(self, *, writes: bool = True) -> AsyncIterator[Connection]:
        """A pooled connection for work beyond the store's own (`store migrate`, the chats'
        active topics); `writes` is refused by a read-only store."""
        async with self._connection(writes=writes) as connection:
            yield connection

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """One transaction that this store's operations in the current task join until the block
        ends: committed together when it ends, rolled back together when it raises. Inside one
        already, a savepoint: what the inner block did is undone if it raises, the outer goes
        on."""
        nested = self._joined() is not None
        async with self._connection(writes=True) as connection, connection.transaction():
            if nested:
                yield connection
                return
            token = _JOINED.set((self, connection))
            try:
                yield connection
            finally:
                _JOINED.reset(token)

    def _joined(self) -> Connection | None:
        joined = _JOINED.get()
        return joined[1] if joined is not None and joined[0] is self else None

    @asynccontextmanager
    async def _connection(self, *, writes: bool = False) -> AsyncIterator[Connection]:
        """A pooled connection (the task's transaction's, inside `transaction()`); a failure of
        the database becomes the store's typed error."""
        pool = self._connected(writes=writes)
        try:
            joined = self._joined()
            if joined is not None:
                yield joined
            else:
                async with pool.acquire(timeout=self.connect_timeout_s) as connection:
                    yield connection
        except DATABASE_ERRORS as error:
            raise database_error(self.dsn, error) from error

    def _connected(self, *, writes: bool = False) -> asyncpg.Pool:
        if self._pool is None:
            raise SessionStoreClosed()
        if writes and self.read_only:
            raise SessionError(f"the session store at {self.where} was opened read-only")
        return self._pool

    # Operations

    async def append_all(
        self, key: SessionKey, messages: Sequence[Message], *, lines: bytes | None = None
    ) -> AppendReceipt:
        """Store messages in order in one statement; a message stored already is skipped.
        `lines`, where the caller has them already: `Message.lines_of(messages)`.
        """
        if not messages:
            return AppendReceipt()
        encoded = (
            [message.to_json() for message in messages]
            if lines is None
            else lines.decode().split("\n")[:-1]  # JSON text holds no raw newline
        )
        initial = SessionMeta.new(key, title=title_of(messages[0]))
        async with self._locks.hold(key), self._connection(writes=True) as connection:
            await queries.append_messages(connection, self.scope, key, initial, encoded, self.where)
        return AppendReceipt()

    async def sync(self) -> None:
        """Nothing to do: every append was committed before it returned."""

    async def load(self, key: SessionKey) -> Session | None:
        if not self._tables:
            self._connected()
            return None
        # One statement: a consistent read (inside the task's transaction, with its writes).
        async with self._connection() as connection:
            return await queries.load_session(connection, self.scope, key, self.where)

    async def _write_whole(self, session: Session, *, create_only: bool) -> None:
        """Replace atomically: the old row is archived (kept), a new one holds the session."""
        async with (
            self._locks.hold(session.key),
            self._connection(writes=True) as connection,
            connection.transaction(),
        ):
            await queries.replace_session(
                connection, self.scope, session, self.where, create_only=create_only
            )

    async def archive(self, key: SessionKey) -> str | None:
        """Stamp the live session archived (its messages stay); where it is now, None if none."""
        async with (
            self._locks.hold(key),
            self._connection(writes=True) as connection,
            connection.transaction(),
        ):
            session_id = await queries.archive_live(connection, self.scope, key)
        if session_id is None:
            return None
        where = f"{self.where} octos_sessions id {session_id}"
        log.info("sessions.archived", key=str(key), archived_as=where)
        return where

    async def list(self, base_key: str | None = None) -> list[SessionInfo]:
        if not self._tables:
            self._connected()
            return []
        async with self._connection() as connection:
            infos, skipped = await queries.list_infos(connection, self.scope, base_key, self.where)
        for key in skipped:
            log.warning("sessions.newer_schema_skipped", key=key, database=self.where)
        return infos

    async def scopes(self) -> builtins.list[str]:
        """Every scope (profile) with a live session in the database."""
        if not self._tables:
            self._connected()
            return []
        async with self._connection() as connection:
            return await queries.list_scopes(connection)

    def release(self, key: SessionKey) -> None:
        """Nothing is held per session between operations."""
