"""The channel's files: the UID mark and the reply threads, atomic and bounded."""

from __future__ import annotations

import asyncio
from pathlib import Path

from channels.email.state import ThreadInfo, ThreadStore, UidMark, UidStore


async def test_the_uid_mark_round_trips_and_a_torn_file_counts_as_none(tmp_path: Path) -> None:
    store = UidStore(tmp_path / "email" / "uid-state.json")
    assert await store.load() is None
    await store.save(UidMark(uidvalidity=7, last_uid=42))
    assert await store.load() == UidMark(7, 42)
    await asyncio.to_thread(store.path.write_text, '{"uidvalidity": 7, "last_')
    assert await store.load() is None
    await asyncio.to_thread(store.path.write_text, '{"uidvalidity": "7"}')
    assert await store.load() is None
    leftovers = await asyncio.to_thread(lambda: sorted(p.name for p in store.path.parent.iterdir()))
    assert leftovers == ["uid-state.json"]  # no temporary file left behind


async def test_threads_are_kept_across_a_restart_and_bounded(tmp_path: Path) -> None:
    path = tmp_path / "threads.json"
    store = ThreadStore(path, max_entries=3)
    for n in range(5):
        chat = "alice@example.org" if n % 2 == 0 else "bob@example.org"
        await store.remember(ThreadInfo(chat, f"m{n}@x", f"subject {n}", (f"r{n}@x",)))
    reloaded = ThreadStore(path, max_entries=3)
    await reloaded.load()
    assert reloaded.get("m0@x") is None  # the oldest went
    assert reloaded.get("m4@x") == ThreadInfo("alice@example.org", "m4@x", "subject 4", ("r4@x",))
    latest_bob = reloaded.latest("bob@example.org")
    assert latest_bob is not None
    assert latest_bob.message_id == "m3@x"
    assert reloaded.latest("carol@example.org") is None


async def test_a_broken_thread_entry_is_skipped_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "threads.json"
    good = '{"chat_id": "a@x", "message_id": "m@x", "subject": "s", "references": []}'
    await asyncio.to_thread(path.write_text, '{"threads": [{"chat_id": "a@x"}, ' + good + "]}")
    store = ThreadStore(path)
    await store.load()
    assert store.get("m@x") == ThreadInfo("a@x", "m@x", "s", ())
