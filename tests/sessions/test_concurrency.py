"""Many concurrent appends: every line lands once, each session in its own order."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from bus import Message, SessionKey
from sessions import FsyncPolicy, SessionStore
from sessions.layout import SessionLayout
from sessions.operations import load_session
from sessions.recovery import SessionFile
from tests.sessions.conftest import chat_key, contents

WAIT_S = 5.0


@pytest.mark.parametrize(
    ("fsync", "sessions", "per_session"),
    [("batch", 100, 100), ("never", 100, 100), ("always", 20, 50)],  # always: one fsync each
)
async def test_100_sessions_by_100_concurrent_appends(
    tmp_path: Path, fsync: FsyncPolicy, sessions: int, per_session: int
) -> None:
    async with SessionStore(tmp_path, fsync=fsync) as store:
        # Every append of every session is in flight at once; call order is the order asked for.
        await asyncio.gather(
            *(
                store.append(chat_key(chat), Message.user(f"{chat}:{index}"))
                for index in range(per_session)
                for chat in range(sessions)
            )
        )
        loaded = [await store.load(chat_key(chat)) for chat in range(sessions)]
    for chat, session in enumerate(loaded):
        assert session is not None
        assert contents(session.messages) == [f"{chat}:{index}" for index in range(per_session)]


async def test_a_cancelled_append_still_lands_in_order(tmp_path: Path) -> None:
    key = chat_key(1)
    async with SessionStore(tmp_path) as store:
        await store.append(key, Message.user("0"))
        tasks = [asyncio.create_task(store.append(key, Message.user(str(i)))) for i in (1, 2, 3)]
        # Scheduled after the tasks' first steps, which queue their lines: the loop runs
        # callbacks in order, so the cancel lands while the line waits for the disk.
        asyncio.get_running_loop().call_soon(tasks[1].cancel)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        session = await store.load(key)
    assert isinstance(results[1], asyncio.CancelledError)
    assert session is not None
    assert contents(session.messages) == ["0", "1", "2", "3"]


async def test_load_waits_for_queued_appends(tmp_path: Path) -> None:
    key = chat_key(2)
    async with SessionStore(tmp_path) as store:
        appends = [asyncio.create_task(store.append(key, Message.user(str(i)))) for i in range(50)]
        # Started after the appends (tasks start in creation order), so it queues behind them.
        session = await asyncio.create_task(store.load(key))
        await asyncio.gather(*appends)
    assert session is not None
    assert contents(session.messages) == [str(i) for i in range(50)]


async def test_a_cancelled_load_keeps_the_session_locked_until_its_thread_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = chat_key(3)
    started, release = threading.Event(), threading.Event()

    def paused_load(
        layout: SessionLayout, key: SessionKey, *, repair: bool = True
    ) -> SessionFile | None:
        started.set()
        release.wait(WAIT_S)
        return load_session(layout, key, repair=repair)

    async with SessionStore(tmp_path) as store:
        await store.append_all(key, [Message.user("0"), Message.user("1")])
        await store.load(key)
        _append_raw(store.path_for(key), b'{"role":"user","content":"tor')
        monkeypatch.setattr("sessions.store.load_session", paused_load)
        loading = asyncio.create_task(store.load(key))
        assert await asyncio.to_thread(started.wait, WAIT_S)
        loading.cancel()
        appending = asyncio.create_task(store.append(key, Message.user("2")))
        for _ in range(5):
            await _yield_to_others()
        # The repair still runs in its thread: the load holds the session, the append waits.
        assert not loading.done()
        assert not appending.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await loading
        await appending
        session = await store.load(key)
    assert session is not None
    assert contents(session.messages) == ["0", "1", "2"]
    assert store.path_for(key).with_name("default.jsonl.torn").exists()


async def _yield_to_others() -> None:
    resumed = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(resumed.set_result, None)
    await resumed


def _append_raw(path: Path, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)
