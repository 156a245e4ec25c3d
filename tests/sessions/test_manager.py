"""SessionManager: lazy sessions, write-through appends, bounded memory, topics' lifecycle."""

from __future__ import annotations

import asyncio
import gc
import pathlib
import tracemalloc
from pathlib import Path

from bus import Message
from sessions import SessionManager, SessionStore, is_compaction_summary
from tests.sessions.conftest import chat_key, contents, numbered


async def test_a_new_session_exists_only_in_memory_until_its_first_message(
    store: SessionStore,
) -> None:
    manager = SessionManager(store)
    session = await manager.get(chat_key(1))
    assert session.messages == []
    assert not store.path_for(chat_key(1)).exists()
    await manager.append(chat_key(1), Message.user("hello there"))
    assert store.path_for(chat_key(1)).exists()
    assert (await manager.get(chat_key(1))) is session
    assert contents(session.messages) == ["hello there"]
    assert session.meta.title == "hello there"


async def test_history_returns_the_last_messages_from_disk_after_eviction(
    store: SessionStore,
) -> None:
    manager = SessionManager(store, max_open=2)
    await manager.append_all(chat_key(1), numbered(10))
    assert contents(await manager.history(chat_key(1), 3)) == contents(numbered(3, 7))
    assert manager.evict(chat_key(1))
    assert chat_key(1) not in manager
    assert contents(await manager.history(chat_key(1), None)) == contents(numbered(10))
    assert await manager.history(chat_key(1), 0) == []


async def test_the_lru_keeps_at_most_max_open_sessions(store: SessionStore) -> None:
    manager = SessionManager(store, max_open=3)
    for chat in range(10):
        await manager.append(chat_key(chat), Message.user(f"to {chat}"))
        assert len(manager) <= 3
    await manager.get(chat_key(7))  # most recently used now: survives the next two
    await manager.get(chat_key(0))
    await manager.get(chat_key(1))
    assert chat_key(7) in manager
    assert chat_key(8) not in manager
    for chat in range(10):
        assert contents(await manager.history(chat_key(chat))) == [f"to {chat}"]


async def test_memory_does_not_grow_with_the_number_of_sessions_seen(tmp_path: Path) -> None:
    async with SessionStore(tmp_path, fsync="never", max_open_files=50) as store:
        manager = SessionManager(store, max_open=100)

        async def visit_one(number: int) -> None:
            key = chat_key(number % 50, f"topic {number}")
            await manager.append(key, Message.user("x" * 200))
            await manager.history(key, 10)

        async def visit(first: int, count: int) -> None:
            for start in range(first, first + count, 20):
                await asyncio.gather(*(visit_one(n) for n in range(start, start + 20)))

        await visit(0, 3000)
        assert len(manager) == 100
        assert store.open_file_count <= 50
        assert len(manager._loading) == 0
        assert len(store._locks) == 0
        tracemalloc.start()
        try:
            # Both measurements see a full cache of sessions allocated while tracing.
            await visit(3000, 400)
            gc.collect()
            before = _traced_bytes()
            await visit(3400, 1000)
            gc.collect()
            grown = _traced_bytes() - before
        finally:
            tracemalloc.stop()
        assert len(manager) == 100
        # 1000 more sessions: a leak of even 50 bytes each would show as 50 kB (measuring
        # itself costs some 15 kB).
        assert grown < 50_000, f"memory grew by {grown} bytes over 1000 more sessions"


def _traced_bytes() -> int:
    # pathlib interns every path part; CPython's intern table grows in steps of its own.
    interned = tracemalloc.Filter(False, pathlib.__file__)
    snapshot = tracemalloc.take_snapshot().filter_traces([interned])
    return sum(stat.size for stat in snapshot.statistics("filename"))


async def test_fork_reset_and_delete(store: SessionStore) -> None:
    manager = SessionManager(store)
    parent, child = chat_key(1), chat_key(1, "side")
    await manager.append_all(parent, numbered(6))
    forked = await manager.fork(parent, child, 2)
    assert contents(await manager.history(child)) == contents(numbered(2, 4))
    assert forked.parent_key == parent
    await manager.append(child, Message.user("on the side"))

    await manager.reset(parent)
    assert await manager.history(parent) == []
    assert not store.path_for(parent).exists()
    archived = [p.name for p in store.path_for(parent).parent.glob("default.*.archived.jsonl")]
    assert len(archived) == 1

    infos = await manager.list_sessions(parent.base_key())
    assert [(info.topic, info.message_count) for info in infos] == [("side", 3)]
    await manager.delete(child)
    assert await manager.list_sessions(parent.base_key()) == []
    assert await manager.history(child) == []


async def test_a_compacted_session_is_reloaded_from_its_file(tmp_path: Path) -> None:
    async with SessionStore(tmp_path, max_file_bytes=4096) as store:
        manager = SessionManager(store)
        for index in range(100):
            await manager.append(chat_key(1), Message.user(f"{index} " + "w" * 50))
        history = await manager.history(chat_key(1))
        on_disk = await store.load(chat_key(1))
    assert on_disk is not None
    assert contents(history) == contents(on_disk.messages)
    assert is_compaction_summary(history[0])
    assert history[-1].content.startswith("99 ")


async def test_concurrent_gets_load_a_session_once(store: SessionStore) -> None:
    await store.append_all(chat_key(1), numbered(3))
    manager = SessionManager(store)
    sessions = await asyncio.gather(*(manager.get(chat_key(1)) for _ in range(20)))
    assert all(session is sessions[0] for session in sessions)
