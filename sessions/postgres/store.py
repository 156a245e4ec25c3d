"""`PostgresSessionStore`: the sessions of one profile in PostgreSQL, same contract as the files.

Every append is one committed transaction (upsert the session row, one INSERT of the batch,
update its counters), so `sync()` has nothing left to do. Appends to one session keep their call
order (a per-session lock here, the session row's lock in the database across processes).
`fork` and `rewrite` run in transactions; `archive` and `rewrite` stamp the old row archived and
keep its messages. A store opened `read_only` never creates or changes anything.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from types import TracebackType
from typing import Self

import asyncpg
import structlog

from bus import Message, SessionKey
from bus.message import utc_now
from config.store import redact_dsn
from sessions.errors import (
    EmptyRewriteRefused,
    SessionError,
    SessionExists,
    SessionStoreClosed,
    UnsupportedSessionSchema,
)
from sessions.keyed_lock import KeyedLocks
from sessions.meta import CURRENT_SCHEMA_VERSION, SessionMeta
from sessions.postgres.connect import DATABASE_ERRORS, close_pool, create_pool, database_error
from sessions.postgres.schema import SCHEMA_VERSION, StoreSchemaTooNew, applied_version
from sessions.postgres.schema import ensure_schema as ensure_schema
from sessions.postgres.sql import (
    APPEND,
    COUNT_APPENDED,
    INSERT_MESSAGES,
    LIST,
    LIVE_ROW,
    UPSERT_ROW,
    fingerprint,
    line_bytes,
)
from sessions.session import Session, SessionInfo
from sessions.store import AppendReceipt

log = structlog.get_logger(__name__)

_Acquire = AbstractAsyncContextManager[asyncpg.Connection]


def _title_column(meta: SessionMeta) -> str | None:
    # A `text` column cannot hold NUL (the meta's JSON keeps the title as it is).
    return None if meta.title is None else meta.title.replace("\x00", "")


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


class PostgresSessionStore:
    def __init__(
        self,
        dsn: str,
        scope: str,
        *,
        read_only: bool = False,
        pool_size: int = 4,
        connect_timeout_s: float = 10.0,
    ) -> None:
        """`scope` names whose sessions these are (the profile id): one database, many profiles."""
        self.dsn = dsn
        self.scope = scope
        self.pool_size = pool_size
        self.connect_timeout_s = connect_timeout_s
        self._read_only = read_only
        self._pool: asyncpg.Pool | None = None
        self._tables = False  # whether the session tables exist (a read-only store may find none)
        self._locks: KeyedLocks[SessionKey] = KeyedLocks()

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def where(self) -> str:
        """The database, password redacted, as messages name it."""
        return redact_dsn(self.dsn)

    # Lifecycle

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect; create or migrate the schema (unless read-only). StoreUnavailable if not."""
        pool = await create_pool(
            self.dsn, max_size=self.pool_size, connect_timeout_s=self.connect_timeout_s
        )
        try:
            async with pool.acquire(timeout=self.connect_timeout_s) as connection:
                if self._read_only:
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

    def connection(self) -> _Acquire:
        """A pooled connection for work beyond the store's own (`store migrate`)."""
        return self._connected(writes=True).acquire(timeout=self.connect_timeout_s)  # type: ignore[no-any-return]

    def _connected(self, *, writes: bool = False) -> asyncpg.Pool:
        if self._pool is None:
            raise SessionStoreClosed()
        if writes and self._read_only:
            raise SessionError(f"the session store at {self.where} was opened read-only")
        return self._pool

    # Operations

    async def append(self, key: SessionKey, message: Message) -> None:
        await self.append_all(key, [message])

    async def append_all(self, key: SessionKey, messages: Sequence[Message]) -> AppendReceipt:
        """Store messages in order in one transaction; a message stored already is skipped."""
        if not messages:
            return AppendReceipt()
        pool = self._connected(writes=True)
        encoded = [message.to_json() for message in messages]
        initial = SessionMeta.new(key).titled_by(messages[0])
        async with self._locks.hold(key):
            try:
                async with pool.acquire(timeout=self.connect_timeout_s) as connection:
                    await self._append(connection, key, initial, encoded)
            except DATABASE_ERRORS as error:
                raise database_error(self.dsn, error) from error
        return AppendReceipt()

    async def _append(
        self,
        connection: asyncpg.Connection,
        key: SessionKey,
        initial: SessionMeta,
        encoded: list[str],
    ) -> None:
        meta_text = initial.to_json()
        found = await connection.fetchval(
            APPEND,
            self.scope,
            str(key),
            key.base_key(),
            key.topic(),
            initial.schema_version,
            meta_text,
            _title_column(initial),
            initial.parent_key,
            initial.created_at,
            utc_now(),
            line_bytes(meta_text),
            CURRENT_SCHEMA_VERSION,
            [fingerprint(text) for text in encoded],
            encoded,
            [line_bytes(text) for text in encoded],
        )
        if found > CURRENT_SCHEMA_VERSION:
            raise UnsupportedStoredSchema(self._name(key), found)

    def _upsert_args(self, key: SessionKey, meta: SessionMeta, now: datetime) -> list[object]:
        meta_text = meta.to_json()
        return [
            UPSERT_ROW,
            self.scope,
            str(key),
            key.base_key(),
            key.topic(),
            meta.schema_version,
            meta_text,
            _title_column(meta),
            meta.parent_key,
            meta.created_at,
            now,
            line_bytes(meta_text),
        ]

    async def sync(self) -> None:
        """Nothing to do: every append was committed before it returned."""

    async def load(self, key: SessionKey) -> Session | None:
        pool = self._connected()
        if not self._tables:
            return None
        try:
            async with (
                pool.acquire(timeout=self.connect_timeout_s) as connection,
                connection.transaction(isolation="repeatable_read", readonly=True),
            ):
                return await self._load(connection, key)
        except DATABASE_ERRORS as error:
            raise database_error(self.dsn, error) from error

    async def _load(self, connection: asyncpg.Connection, key: SessionKey) -> Session | None:
        row = await connection.fetchrow(LIVE_ROW, self.scope, str(key))
        if row is None:
            return None
        if row["schema_version"] > CURRENT_SCHEMA_VERSION:
            raise UnsupportedStoredSchema(self._name(key), row["schema_version"])
        meta = SessionMeta.model_validate_json(row["meta"])
        meta = meta.model_copy(update={"updated_at": row["updated_at"]})
        records = await connection.fetch(
            "SELECT message::text AS message FROM octos_messages WHERE session_id = $1 "
            "ORDER BY seq",
            row["id"],
        )
        return Session(key, meta, [Message.from_json(record["message"]) for record in records])

    async def rewrite(self, session: Session) -> None:
        """Replace the session atomically: the old row is archived (kept), a new one holds it."""
        await self._write_whole(session, create_only=False)

    async def fork(self, parent: SessionKey, child: SessionKey, copy_messages: int) -> Session:
        source = await self.load(parent)
        copied = [] if source is None or copy_messages <= 0 else source.messages[-copy_messages:]
        meta = SessionMeta.new(child, parent_key=parent)
        for message in copied:
            meta = meta.titled_by(message)
        session = Session(child, meta, list(copied))
        await self._write_whole(session, create_only=True)
        return session

    async def _write_whole(self, session: Session, *, create_only: bool) -> None:
        pool = self._connected(writes=True)
        key = session.key
        async with self._locks.hold(key):
            try:
                async with (
                    pool.acquire(timeout=self.connect_timeout_s) as connection,
                    connection.transaction(),
                ):
                    await self._replace(connection, session, create_only=create_only)
            except DATABASE_ERRORS as error:
                raise database_error(self.dsn, error) from error

    async def _replace(
        self, connection: asyncpg.Connection, session: Session, *, create_only: bool
    ) -> None:
        key = session.key
        row = await connection.fetchrow(LIVE_ROW + " FOR UPDATE", self.scope, str(key))
        if row is not None:
            if create_only:
                raise SessionExists(str(key), self._name(key))
            if not session.messages and row["message_count"] > 0:
                raise EmptyRewriteRefused(str(key), self._name(key))
            await self._archive_row(connection, row["id"], "rewritten")
        meta = session.meta.current_schema()
        now = utc_now()
        row = await connection.fetchrow(*self._upsert_args(key, meta, now))
        assert row is not None
        encoded = [message.to_json() for message in session.messages]
        inserted = await connection.fetch(
            INSERT_MESSAGES, row["id"], 0, [fingerprint(text) for text in encoded], encoded
        )
        size = sum(line_bytes(encoded[record["seq"]]) for record in inserted)
        await connection.execute(COUNT_APPENDED, row["id"], len(encoded), len(inserted), size)

    async def archive(self, key: SessionKey) -> str | None:
        """Stamp the live session archived (its messages stay); where it is now, None if none."""
        pool = self._connected(writes=True)
        async with self._locks.hold(key):
            try:
                async with (
                    pool.acquire(timeout=self.connect_timeout_s) as connection,
                    connection.transaction(),
                ):
                    row = await connection.fetchrow(LIVE_ROW + " FOR UPDATE", self.scope, str(key))
                    if row is None:
                        return None
                    await self._archive_row(connection, row["id"], "archived")
            except DATABASE_ERRORS as error:
                raise database_error(self.dsn, error) from error
        where = f"{self.where} octos_sessions id {row['id']}"
        log.info("sessions.archived", key=str(key), archived_as=where)
        return where

    @staticmethod
    async def _archive_row(connection: asyncpg.Connection, session_id: int, reason: str) -> None:
        await connection.execute(
            "UPDATE octos_sessions SET archived_at = now(), archive_reason = $2 WHERE id = $1",
            session_id,
            reason,
        )

    async def list(self, base_key: str | None = None) -> list[SessionInfo]:
        pool = self._connected()
        if not self._tables:
            return []
        try:
            async with pool.acquire(timeout=self.connect_timeout_s) as connection:
                rows = await connection.fetch(LIST, self.scope, base_key)
        except DATABASE_ERRORS as error:
            raise database_error(self.dsn, error) from error
        infos = []
        for row in rows:
            if row["schema_version"] > CURRENT_SCHEMA_VERSION:
                log.warning(
                    "sessions.newer_schema_skipped",
                    key=row["session_key"],
                    schema_version=row["schema_version"],
                )
                continue
            key = SessionKey.parse(row["session_key"])
            infos.append(
                SessionInfo(
                    key=key,
                    topic=key.topic(),
                    message_count=row["message_count"],
                    size=row["bytes"],
                    updated_at=row["updated_at"],
                    path=f"{self.where} octos_sessions id {row['id']}",
                    title=row["title"],
                    parent_key=row["parent_key"],
                )
            )
        return infos

    async def scopes(self) -> builtins.list[str]:
        """Every scope (profile) with a live session in the database."""
        pool = self._connected()
        if not self._tables:
            return []
        try:
            async with pool.acquire(timeout=self.connect_timeout_s) as connection:
                rows = await connection.fetch(
                    "SELECT DISTINCT scope FROM octos_sessions WHERE archived_at IS NULL "
                    "ORDER BY scope"
                )
        except DATABASE_ERRORS as error:
            raise database_error(self.dsn, error) from error
        return [str(row["scope"]) for row in rows]

    def release(self, key: SessionKey) -> None:
        """Nothing is held per session between operations."""

    def _name(self, key: SessionKey) -> str:
        return f"{str(key)!r} in {self.where}"
