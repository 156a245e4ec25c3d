"""`PostgresPairingStore`: a profile's pairing codes and approved senders in the sessions'
database, so the ingress processes of a cluster need no shared data directory to pair.

    octos_pairing_codes    a code per row (the same rules as the files: valid an hour, once;
                           the sender's valid code given again; `MAX_CODES_PER_DAY` a day),
                           kept a day for that count
    octos_allowed_senders  the allow-list overlay, a row per (profile, channel, sender)

Issuing takes an advisory lock on the sender, so two ingress processes answering the same
stranger at once give one code. Every change of the overlay sends a NOTIFY (payload: the
profile) in its transaction; a daemon LISTENs on one connection of its own for all its profiles
(`OverlayChanges`) and reads a profile's overlay again when one names it, and whenever it
(re)connects, so a change made while it was away is not missed. The tables are migration 3 of
`sessions.postgres.schema`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import asyncpg
import structlog

from channels.access.allow import AllowList, OverlayEntry
from channels.access.pairing import (
    CODE_TTL_S,
    DAY_S,
    MAX_CODES_PER_DAY,
    OnChange,
    OverlayReads,
    PairingStore,
    PendingPair,
    new_code,
    normalise_code,
)
from sessions.postgres.connect import DATABASE_ERRORS, database_error

if TYPE_CHECKING:
    from sessions.postgres.connect import Connection

log = structlog.get_logger(__name__)

#: The NOTIFY channel of overlay changes; the payload is the profile (scope).
CHANGES: Final = "octos_allowed_senders"
#: How long the listener waits quietly before checking that its connection still answers.
LISTENER_CHECK_S: Final = 30.0
#: The wait before connecting the listener again after it was lost.
LISTENER_RETRY_S: Final = 2.0

_VALID: Final = """
SELECT code FROM octos_pairing_codes
WHERE scope = $1 AND channel = $2 AND sender_id = $3 AND redeemed_at IS NULL
  AND expires_at > now()
"""
_ISSUED_TODAY: Final = """
SELECT count(*) FROM octos_pairing_codes
WHERE scope = $1 AND channel = $2 AND sender_id = $3
  AND issued_at > now() - make_interval(secs => $4)
"""
_INSERT: Final = """
INSERT INTO octos_pairing_codes (code, scope, channel, sender_id, chat_id, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
ON CONFLICT (code) DO NOTHING
RETURNING code
"""
_REDEEM: Final = """
UPDATE octos_pairing_codes SET redeemed_at = now()
WHERE code = $1 AND scope = $2 AND redeemed_at IS NULL AND expires_at > now()
RETURNING channel, sender_id, chat_id
"""
_ENTRIES: Final = """
SELECT channel, sender_id, added_at FROM octos_allowed_senders WHERE scope = $1
ORDER BY channel, added_at, sender_id
"""


class PostgresPairingStore(PairingStore):
    """The pairing of profile `scope`, over `pool` and told of changes by `changes`, both
    shared with the other profiles of the process that pair on the database (a store opened
    without `changes`, the CLI's, does not `watch`)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        dsn: str,
        scope: str,
        *,
        changes: OverlayChanges | None = None,
    ) -> None:
        self._pool = pool
        self._dsn = dsn
        self.scope = scope
        self._changes = changes
        self._reads = OverlayReads()

    async def issue(self, channel: str, sender_id: str, chat_id: str) -> str | None:
        scope = self.scope
        try:
            async with self._pool.acquire() as connection, connection.transaction():
                await connection.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                    f"octos-pairing:{scope}:{channel}:{sender_id}",
                )
                await connection.execute(
                    "DELETE FROM octos_pairing_codes "
                    "WHERE issued_at < now() - make_interval(secs => $1)",
                    DAY_S,
                )
                valid = await connection.fetchval(_VALID, scope, channel, sender_id)
                if valid is not None:
                    return str(valid)
                issued = await connection.fetchval(_ISSUED_TODAY, scope, channel, sender_id, DAY_S)
                if issued >= MAX_CODES_PER_DAY:
                    return None
                return await _insert_code(connection, scope, channel, sender_id, chat_id)
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error

    async def redeem(self, code: str) -> PendingPair | None:
        row = await self._fetchrow(_REDEEM, normalise_code(code), self.scope)
        if row is None:
            return None
        return PendingPair(row["channel"], row["sender_id"], row["chat_id"])

    async def entries(self) -> list[OverlayEntry]:
        try:
            rows = await self._pool.fetch(_ENTRIES, self.scope)
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        return [_entry(row) for row in rows]

    async def add(self, channel: str, sender_id: str) -> bool:
        try:
            async with self._pool.acquire() as connection, connection.transaction():
                added = await connection.fetchval(
                    "INSERT INTO octos_allowed_senders (scope, channel, sender_id) "
                    "VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING true",
                    self.scope,
                    channel,
                    sender_id,
                )
                if added:
                    await connection.execute("SELECT pg_notify($1, $2)", CHANGES, self.scope)
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        return bool(added)

    async def remove(self, sender_id: str, channel: str | None = None) -> list[OverlayEntry]:
        # Matched as an allow list matches (any `|` identity, `@`, case): like the files.
        wanted = AllowList([sender_id])
        try:
            async with self._pool.acquire() as connection, connection.transaction():
                rows = await connection.fetch(
                    "SELECT channel, sender_id, added_at FROM octos_allowed_senders "
                    "WHERE scope = $1 AND ($2::text IS NULL OR channel = $2) "
                    "ORDER BY channel, added_at, sender_id FOR UPDATE",
                    self.scope,
                    channel,
                )
                removed = [row for row in rows if wanted.allows(row["sender_id"])]
                if removed:
                    await connection.execute(
                        "DELETE FROM octos_allowed_senders AS a USING "
                        "unnest($2::text[], $3::text[]) AS r(channel, sender_id) "
                        "WHERE a.scope = $1 AND a.channel = r.channel "
                        "AND a.sender_id = r.sender_id",
                        self.scope,
                        [row["channel"] for row in removed],
                        [row["sender_id"] for row in removed],
                    )
                    await connection.execute("SELECT pg_notify($1, $2)", CHANGES, self.scope)
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error
        return [_entry(row) for row in removed]

    async def watch(self, on_change: OnChange) -> None:
        changes = self._changes
        if changes is None:
            raise RuntimeError("this pairing store was opened without a listener to watch with")
        with changes.watching(self.scope) as changed:
            while True:
                # LISTEN, then read: a change committed after the read is notified.
                await changes.listening()
                changed.clear()
                await self.look_again(on_change)
                await changed.wait()

    async def look_again(self, on_change: OnChange) -> None:
        # The whole overlay, not only the sender asked about: it is what `on_change` replaces,
        # and a profile's is small.
        await self._reads.read(self.entries, on_change)

    async def _fetchrow(self, query: str, *args: object) -> asyncpg.Record | None:
        try:
            return await self._pool.fetchrow(query, *args)
        except DATABASE_ERRORS as error:
            raise database_error(self._dsn, error) from error


async def _insert_code(
    connection: Connection, scope: str, channel: str, sender_id: str, chat_id: str
) -> str:
    """A new code for the sender (another one drawn in the unlikely case it is taken)."""
    while True:
        inserted = await connection.fetchval(
            _INSERT, new_code(), scope, channel, sender_id, chat_id, CODE_TTL_S
        )
        if inserted is not None:
            return str(inserted)


async def import_approved(connection: Connection, scope: str, entries: list[OverlayEntry]) -> int:
    """Copy a profile's overlay file in (`store migrate`); how many senders were new."""
    if not entries:
        return 0
    now = datetime.now(UTC)
    status = await connection.execute(
        "INSERT INTO octos_allowed_senders (scope, channel, sender_id, added_at) "
        "SELECT $1, e.channel, e.sender_id, e.added_at "
        "FROM unnest($2::text[], $3::text[], $4::timestamptz[]) AS e(channel, sender_id, added_at) "
        "ON CONFLICT DO NOTHING",
        scope,
        [entry.channel for entry in entries],
        [entry.sender_id for entry in entries],
        [datetime.fromisoformat(entry.added_at) if entry.added_at else now for entry in entries],
    )
    added = int(status.rsplit(" ", 1)[-1])  # "INSERT 0 <rows>"
    if added:
        await connection.execute("SELECT pg_notify($1, $2)", CHANGES, scope)
    return added


def _entry(row: asyncpg.Record) -> OverlayEntry:
    added_at = row["added_at"].isoformat(timespec="seconds")
    return OverlayEntry(row["channel"], row["sender_id"], added_at)


class OverlayChanges:
    """One LISTEN connection for the overlay changes of every profile of a process on one
    database. A watcher of a profile is woken by a NOTIFY naming it, and each time the listener
    (re)connects, so a change made while it was away is read too; `listening` holds a watcher
    back until the LISTEN is in place. `run` is the listener, until cancelled."""

    def __init__(self, dsn: str, *, connect_timeout_s: float = 10.0) -> None:
        self._dsn = dsn
        self._connect_timeout_s = connect_timeout_s
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._listening = asyncio.Event()

    @contextlib.contextmanager
    def watching(self, scope: str) -> Iterator[asyncio.Event]:
        """An event set whenever profile `scope`'s approvals may have changed."""
        changed = asyncio.Event()
        watchers = self._watchers.setdefault(scope, set())
        watchers.add(changed)
        try:
            yield changed
        finally:
            watchers.discard(changed)
            if not watchers:
                del self._watchers[scope]

    async def listening(self) -> None:
        await self._listening.wait()

    async def run(self) -> None:
        while True:
            try:
                await self._listen()
                reason = "the server closed the connection"
            except DATABASE_ERRORS as error:
                reason = str(error) or type(error).__name__
            log.warning(
                "allow.overlay_listener_lost",
                profiles=sorted(self._watchers),
                error=reason,
                detail="the approvals read last stay in force until it is back",
                retry_in_s=LISTENER_RETRY_S,
            )
            await asyncio.sleep(LISTENER_RETRY_S)

    async def _listen(self) -> None:
        """Returns when the connection is lost."""
        listener = await asyncpg.connect(self._dsn, timeout=self._connect_timeout_s)
        lost = asyncio.Event()

        def notified(_connection: Any, _pid: int, _channel: str, payload: object) -> None:
            for changed in self._watchers.get(str(payload), ()):
                changed.set()

        try:
            listener.add_termination_listener(lambda _connection: lost.set())
            await listener.add_listener(CHANGES, notified)
            # In place: every watcher reads again, for what changed while none listened.
            for watchers in self._watchers.values():
                for changed in watchers:
                    changed.set()
            self._listening.set()
            while not lost.is_set() and not listener.is_closed():
                try:
                    await asyncio.wait_for(lost.wait(), LISTENER_CHECK_S)
                except TimeoutError:
                    # Quiet for long: make sure the quiet is not a dead connection's.
                    await listener.fetchval("SELECT 1", timeout=self._connect_timeout_s)
        finally:
            self._listening.clear()
            listener.terminate()
