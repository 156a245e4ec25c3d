"""Pairing in the running daemon: codes for strangers, and the overlay kept current.

The dispatcher asks `stranger_notice` what to tell a refused sender: on a channel with
`pairing: true`, a notice with their one-time code (see `channels.access.pairing`); elsewhere
None, and the plain "your id is" notice. `watch` follows the profile's pairing store
(files, or PostgreSQL shared by every ingress of a cluster), so an
approval by `octos-gateway pair` or a withdrawal by `allow remove` takes effect at once; and
before a sender on a pairing channel is refused, `reread` reads the approvals again, so one
approved a moment ago (the watch's next look still to come) is let in, not refused.

A profile's pairing store sits beside its sessions: the files in its data directory (`store:
{backend: jsonl}`) or tables in the sessions' PostgreSQL database (`backend: postgres`), so a
cluster's ingress processes pair through the database, not a shared disk; the profiles of one
process share a pool and a listener there (`PairingDatabases`).

PostgreSQL's modules (and asyncpg) are imported only when a configuration asks for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import structlog

from bus import InboundMessage
from channels.access.allow import ApprovedSenders, OverlayEntry
from channels.access.pairing import CODE_TTL_S, FilePairingStore, PairingStore, display_code
from config.store import StoreConfig
from sessions.errors import SessionError

if TYPE_CHECKING:
    import asyncpg

    from channels.access.postgres_pairing import OverlayChanges


#: Connections a process's pairing pool may hold (codes are issued one stranger at a time).
_POOL_SIZE: Final = 2
_SCOPES: Final = """
SELECT scope FROM octos_pairing_codes UNION SELECT scope FROM octos_allowed_senders
ORDER BY scope
"""


class PairingDatabases:
    """The pairing databases of one process. For each, one small pool and one listener
    (`OverlayChanges`) serve every profile that pairs there: opened by the first of them,
    closed with the last (profiles come and go on a reload), so a process's connections for
    pairing do not grow with its profiles."""

    def __init__(self) -> None:
        self._open: dict[str, _SharedDatabase] = {}
        self._lock = asyncio.Lock()

    def __len__(self) -> int:
        """How many databases are open now, each for the profiles that pair there."""
        return len(self._open)

    @asynccontextmanager
    async def store(self, config: StoreConfig, root: Path) -> AsyncIterator[PairingStore]:
        """The pairing of the profile whose data directory is `root` (named as the profile)."""
        if config.backend != "postgres":
            yield FilePairingStore(root)
            return
        from channels.access.postgres_pairing import PostgresPairingStore

        shared = await self._acquire(config)
        try:
            yield PostgresPairingStore(shared.pool, shared.dsn, root.name, changes=shared.changes)
        finally:
            await self._release(shared)

    async def _acquire(self, config: StoreConfig) -> _SharedDatabase:
        from channels.access.postgres_pairing import OverlayChanges

        assert config.dsn is not None  # the config model requires it with this backend
        key = config.dsn.get_secret_value()
        async with self._lock:
            shared = self._open.get(key)
            if shared is None:
                stack = AsyncExitStack()
                pool, dsn = await stack.enter_async_context(_database(config))
                changes = OverlayChanges(dsn, connect_timeout_s=config.connect_timeout_s)
                listener = asyncio.create_task(changes.run(), name="pairing-overlay-listener")
                stack.push_async_callback(_stopped, listener)
                shared = self._open[key] = _SharedDatabase(key, pool, dsn, changes, stack)
            shared.users += 1
            return shared

    async def _release(self, shared: _SharedDatabase) -> None:
        async with self._lock:
            shared.users -= 1
            if shared.users == 0:
                del self._open[shared.key]
                await shared.stack.aclose()


@dataclass(eq=False)
class _SharedDatabase:
    key: str
    pool: asyncpg.Pool
    dsn: str
    changes: OverlayChanges
    stack: AsyncExitStack
    users: int = 0


async def _stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@asynccontextmanager
async def every_pairing_store(
    config: StoreConfig, data_dir: Path, only: str | None = None
) -> AsyncIterator[dict[str, PairingStore]]:
    """Each profile with pairing kept (or `only` that one), and its store: the profile
    directories in `data_dir`, or the profiles in the database's pairing tables."""
    if config.backend != "postgres":
        yield {profile: FilePairingStore(root) for profile, root in _profile_roots(data_dir, only)}
        return
    from channels.access.postgres_pairing import PostgresPairingStore
    from sessions.postgres.connect import DATABASE_ERRORS, database_error

    async with _database(config) as (pool, dsn):
        try:
            scopes = [str(row["scope"]) for row in await pool.fetch(_SCOPES)]
        except DATABASE_ERRORS as error:
            raise database_error(dsn, error) from error
        yield {
            scope: PostgresPairingStore(pool, dsn, scope)
            for scope in scopes
            if only is None or scope == only
        }


@asynccontextmanager
async def _database(config: StoreConfig) -> AsyncIterator[tuple[asyncpg.Pool, str]]:
    """A small pool on the configured database, its schema created or migrated first (the
    pairing tables may be missing when an ingress starts before any worker did)."""
    from sessions.backends import StoreBackendMissing

    try:
        from sessions.postgres.connect import (
            DATABASE_ERRORS,
            close_pool,
            create_pool,
            database_error,
        )
        from sessions.postgres.schema import ensure_schema
    except ModuleNotFoundError as error:
        raise StoreBackendMissing(error.name or "asyncpg") from error
    assert config.dsn is not None  # the config model requires it with this backend
    dsn = config.dsn.get_secret_value()
    pool = await create_pool(dsn, max_size=_POOL_SIZE, connect_timeout_s=config.connect_timeout_s)
    try:
        try:
            async with pool.acquire(timeout=config.connect_timeout_s) as connection:
                await ensure_schema(connection, config.redacted_dsn)
        except DATABASE_ERRORS as error:
            raise database_error(dsn, error) from error
        yield pool, dsn
    finally:
        await close_pool(pool)


def _profile_roots(data_dir: Path, only: str | None) -> list[tuple[str, Path]]:
    if not data_dir.is_dir():
        return []
    return [
        (path.name, path)
        for path in sorted(data_dir.iterdir())
        if path.is_dir() and (only is None or path.name == only)
    ]


log = structlog.get_logger(__name__)

PAIRING_NOTICE = (
    "Sorry, this bot does not know you yet. To ask for access, send its owner this code: "
    "{code} (valid for {minutes} minutes). Your id is {sender_id}."
)


class Pairing:
    def __init__(self, profile: str, store: PairingStore) -> None:
        self._profile = profile
        self._store = store
        #: What the channels' allow lists consult, kept current by `watch`.
        self.approved = ApprovedSenders()
        self._enabled: set[str] = set()

    def enable(self, channel: str) -> None:
        """Strangers on `channel` get a code (its config says `pairing: true`)."""
        self._enabled.add(channel)

    async def load(self) -> None:
        self.approved.replace(await self._store.entries())

    async def watch(self) -> None:
        """Keep the approved senders current; runs until cancelled."""
        await self._store.watch(self._reload)

    async def reread(self, channel: str) -> None:
        """Read the approvals now, for a sender `channel` is about to refuse. Only pairing adds
        approvals, so a channel without it has none to read."""
        if channel not in self._enabled:
            return
        try:
            await self._store.look_again(self._reload)
        except SessionError as error:
            # The database is away: the approvals read last stand.
            log.warning("allow.overlay_not_read", profile=self._profile, error=str(error))

    def _reload(self, entries: list[OverlayEntry]) -> None:
        if self.approved.replace(entries):
            log.info("allow.overlay_reloaded", profile=self._profile, entries=len(entries))

    async def stranger_notice(self, message: InboundMessage) -> str | None:
        if message.channel not in self._enabled:
            return None
        try:
            code = await self._store.issue(message.channel, message.sender_id, message.chat_id)
        except SessionError as error:
            # The database is away: the stranger gets the plain notice, with their id.
            log.warning("pairing.code_not_issued", profile=self._profile, error=str(error))
            return None
        if code is None:
            log.info("pairing.code_refused", reason="too many codes today")
            return None
        log.info("pairing.code_issued", sender=message.sender_id)
        return PAIRING_NOTICE.format(
            code=display_code(code), minutes=int(CODE_TTL_S // 60), sender_id=message.sender_id
        )


async def open_pairing(
    stack: AsyncExitStack, profile: str, store: AbstractAsyncContextManager[PairingStore]
) -> Pairing:
    """The profile's pairing, its `store` held open by `stack`, with the approvals loaded."""
    pairing = Pairing(profile, await stack.enter_async_context(store))
    await pairing.load()
    return pairing
