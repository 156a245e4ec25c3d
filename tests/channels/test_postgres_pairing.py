"""Pairing codes and the allow-list overlay in PostgreSQL: the files' rules, shared by every
process on the database (each test's stores are separate pools, as separate processes are)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import asyncpg

from channels.access.allow import OverlayEntry
from channels.access.pairing import MAX_CODES_PER_DAY, PairingStore, PendingPair, display_code
from config.store import StoreConfig
from gateway.pairing import PairingDatabases, every_pairing_store
from tests.support.postgres import fresh_scope, postgres_dsn

__all__ = ["postgres_dsn"]  # the fixture


@asynccontextmanager
async def processes(dsn: str, root: Path, count: int) -> AsyncIterator[list[PairingStore]]:
    """The pairing of one profile as `count` processes open it (each its own pool)."""
    config = StoreConfig.model_validate({"backend": "postgres", "dsn": dsn})
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(PairingDatabases().store(config, root))
            for _ in range(count)
        ]


async def execute(dsn: str, statement: str, *args: object) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(statement, *args)
    finally:
        await connection.close()


async def test_a_code_is_reused_while_valid_and_works_once_anywhere(
    postgres_dsn: str, tmp_path: Path
) -> None:
    async with processes(postgres_dsn, tmp_path / fresh_scope(), 2) as (ingress, owner):
        code = await ingress.issue("telegram", "66|mallory", "66")
        assert code is not None
        assert len(code) == 8
        assert await owner.issue("telegram", "66|mallory", "66") == code
        assert await ingress.issue("discord", "66|mallory", "66") != code
        typed = display_code(code).lower()
        assert await owner.redeem(typed) == PendingPair("telegram", "66|mallory", "66")
        assert await ingress.redeem(code) is None
        # Redeemed, the sender's next message gets a new code.
        fresh = await ingress.issue("telegram", "66|mallory", "66")
        assert fresh not in (None, code)


async def test_a_code_of_another_profile_is_not_redeemed_here(
    postgres_dsn: str, tmp_path: Path
) -> None:
    async with (
        processes(postgres_dsn, tmp_path / fresh_scope(), 1) as (one,),
        processes(postgres_dsn, tmp_path / fresh_scope(), 1) as (other,),
    ):
        code = await one.issue("telegram", "66", "66")
        assert code is not None
        assert await other.redeem(code) is None
        assert await one.redeem(code) is not None


async def test_an_expired_code_works_no_more(postgres_dsn: str, tmp_path: Path) -> None:
    async with processes(postgres_dsn, tmp_path / fresh_scope(), 1) as (store,):
        code = await store.issue("telegram", "66", "66")
        assert code is not None
        await execute(
            postgres_dsn,
            "UPDATE octos_pairing_codes SET expires_at = now() - interval '1 second' "
            "WHERE code = $1",
            code,
        )
        assert await store.redeem(code) is None
        assert await store.issue("telegram", "66", "66") not in (None, code)


async def test_a_sender_gets_a_few_codes_a_day(postgres_dsn: str, tmp_path: Path) -> None:
    scope = fresh_scope()
    expire = (
        "UPDATE octos_pairing_codes SET expires_at = now() WHERE scope = $1 AND sender_id = '66'"
    )
    async with processes(postgres_dsn, tmp_path / scope, 1) as (store,):
        for _ in range(MAX_CODES_PER_DAY):
            assert await store.issue("telegram", "66", "66") is not None
            await execute(postgres_dsn, expire, scope)
        assert await store.issue("telegram", "66", "66") is None
        assert await store.issue("telegram", "77", "77") is not None
        await execute(
            postgres_dsn,
            "UPDATE octos_pairing_codes SET issued_at = issued_at - interval '1 day' "
            "WHERE scope = $1",
            scope,
        )
        assert await store.issue("telegram", "66", "66") is not None


async def test_ingress_processes_asked_at_once_give_one_code(
    postgres_dsn: str, tmp_path: Path
) -> None:
    async with processes(postgres_dsn, tmp_path / fresh_scope(), 4) as stores:
        codes = await asyncio.gather(*(s.issue("telegram", "66", "66") for s in stores * 2))
        assert len(set(codes)) == 1
        assert codes[0] is not None


async def test_every_watcher_sees_an_approval_and_a_withdrawal(
    postgres_dsn: str, tmp_path: Path
) -> None:
    async with processes(postgres_dsn, tmp_path / fresh_scope(), 3) as (first, second, owner):
        seen = [asyncio.Queue[list[OverlayEntry]](), asyncio.Queue[list[OverlayEntry]]()]
        async with asyncio.TaskGroup() as tasks:
            watchers = [
                tasks.create_task(store.watch(queue.put_nowait), name=f"watch-{n}")
                for n, (store, queue) in enumerate(zip((first, second), seen, strict=True))
            ]
            for queue in seen:
                assert await queue.get() == []  # the read when the watch starts
            assert await owner.add("telegram", "66")
            assert not await owner.add("telegram", "66")
            for queue in seen:
                (entry,) = await asyncio.wait_for(queue.get(), 10)
                assert (entry.channel, entry.sender_id) == ("telegram", "66")
            assert await owner.remove("66", "discord") == []
            removed = await owner.remove("66")
            assert [(e.channel, e.sender_id) for e in removed] == [("telegram", "66")]
            assert await owner.remove("66") == []
            for queue in seen:
                assert await asyncio.wait_for(queue.get(), 10) == []
            for watcher in watchers:
                watcher.cancel()


async def test_a_watcher_whose_connection_was_cut_reads_what_changed_meanwhile(
    postgres_dsn: str, tmp_path: Path
) -> None:
    async with processes(postgres_dsn, tmp_path / fresh_scope(), 2) as (ingress, owner):
        seen = asyncio.Queue[list[OverlayEntry]]()
        async with asyncio.TaskGroup() as tasks:
            watcher = tasks.create_task(ingress.watch(seen.put_nowait), name="watch")
            assert await seen.get() == []
            await execute(
                postgres_dsn,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN %'",
            )
            # Added while the watcher has no connection: no notification reaches it.
            assert await owner.add("telegram", "66")
            (entry,) = await asyncio.wait_for(seen.get(), 20)
            assert entry.sender_id == "66"
            watcher.cancel()


async def connections_to(dsn: str) -> int:
    """Connections to the database other than the asking one."""
    connection = await asyncpg.connect(dsn)
    try:
        count = await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await connection.close()
    assert isinstance(count, int)
    return count


async def test_the_profiles_of_one_process_share_one_pool_and_one_listener(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Connections for pairing do not grow with a process's profiles: one pool and one LISTEN
    for all of them, each watcher told only of its own profile's changes, and both closed
    with the last profile."""
    config = StoreConfig.model_validate({"backend": "postgres", "dsn": postgres_dsn})
    before = await connections_to(postgres_dsn)
    databases = PairingDatabases()
    scopes = [fresh_scope() for _ in range(4)]
    seen = {scope: asyncio.Queue[list[OverlayEntry]]() for scope in scopes}
    async with AsyncExitStack() as stack, asyncio.TaskGroup() as tasks:
        stores = [
            await stack.enter_async_context(databases.store(config, tmp_path / scope))
            for scope in scopes
        ]
        watchers = [
            tasks.create_task(store.watch(seen[scope].put_nowait), name=f"watch-{scope}")
            for store, scope in zip(stores, scopes, strict=True)
        ]
        for scope in scopes:
            assert await seen[scope].get() == []
        assert await stores[2].add("telegram", "66")
        (entry,) = await asyncio.wait_for(seen[scopes[2]].get(), 10)
        assert entry.sender_id == "66"
        assert all(seen[scope].empty() for scope in scopes)
        # The pool (at most 2) and the listener, for four profiles.
        assert len(databases) == 1
        assert await connections_to(postgres_dsn) - before <= 3
        for watcher in watchers:
            watcher.cancel()
    assert len(databases) == 0  # closed with the last


async def test_the_command_line_finds_every_profile_with_pairing(
    postgres_dsn: str, tmp_path: Path
) -> None:
    scope = fresh_scope()
    async with processes(postgres_dsn, tmp_path / scope, 1) as (store,):
        await store.add("telegram", "66")
    config = StoreConfig.model_validate({"backend": "postgres", "dsn": postgres_dsn})
    async with every_pairing_store(config, tmp_path / "unused") as stores:
        assert scope in stores
        assert [e.sender_id for e in await stores[scope].entries()] == ["66"]
    async with every_pairing_store(config, tmp_path, only=scope) as only:
        assert list(only) == [scope]
