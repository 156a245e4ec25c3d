"""Crash recovery on open: torn tails cut to `.torn`, corrupt lines moved to `.corrupt`."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from bus import Message
from sessions import SessionStore
from tests.sessions.conftest import chat_key, contents, numbered

HALF_LINE = b'{"role":"user","content":"never acknow'


async def _seeded(store: SessionStore, count: int = 3) -> Path:
    await store.append_all(chat_key(1), numbered(count))
    store.release(chat_key(1))
    return store.path_for(chat_key(1))


def _append_raw(path: Path, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)


@pytest.mark.parametrize("first", ["append", "load"])
async def test_a_half_written_line_is_cut_to_a_torn_file(store: SessionStore, first: str) -> None:
    path = await _seeded(store)
    clean = path.read_bytes()
    _append_raw(path, HALF_LINE)
    with capture_logs() as logs:
        if first == "append":
            await store.append(chat_key(1), Message.user("message 3"))
        else:
            loaded = await store.load(chat_key(1))
            assert loaded is not None
            assert contents(loaded.messages) == contents(numbered(3))
            await store.append(chat_key(1), Message.user("message 3"))
    torn = path.with_name("default.jsonl.torn").read_bytes()
    assert torn.startswith(b"# torn tail cut at byte ")
    assert HALF_LINE in torn
    assert path.read_bytes().startswith(clean)
    session = await store.load(chat_key(1))
    assert session is not None
    assert contents(session.messages) == contents(numbered(4))
    assert any(entry["event"] == "sessions.torn_tail_cut" for entry in logs)


async def test_unparseable_lines_at_the_very_end_are_torn_too(store: SessionStore) -> None:
    path = await _seeded(store)
    _append_raw(path, b"\x00\x00\x00\x00\n{not json}\n")
    session = await store.load(chat_key(1))
    assert session is not None
    assert contents(session.messages) == contents(numbered(3))
    assert b"{not json}" in path.with_name("default.jsonl.torn").read_bytes()
    assert path.read_bytes().endswith(b"\n")


async def test_a_corrupt_line_in_the_middle_is_quarantined_and_the_rest_loads(
    store: SessionStore,
) -> None:
    path = await _seeded(store, count=5)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3] = b'{"role":"user","content":"bit rot\xff\n'
    path.write_bytes(b"".join(lines))
    with capture_logs() as logs:
        session = await store.load(chat_key(1))
    assert session is not None
    assert contents(session.messages) == ["message 0", "message 1", "message 3", "message 4"]
    corrupt = path.with_name("default.jsonl.corrupt").read_bytes()
    assert b"# line 4 of default.jsonl" in corrupt
    assert b"bit rot\xff" in corrupt
    reported = [entry for entry in logs if entry["log_level"] == "error"]
    assert reported
    assert reported[0]["lines"] == [4]
    again = await store.load(chat_key(1))
    assert again is not None
    assert len(again.messages) == 4
    assert corrupt == path.with_name("default.jsonl.corrupt").read_bytes()


async def test_a_file_torn_inside_its_first_line_starts_over(store: SessionStore) -> None:
    path = store.path_for(chat_key(2))
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"schema_version":1,"session_ke')
    assert await store.load(chat_key(2)) is None
    await store.append(chat_key(2), Message.user("first"))
    session = await store.load(chat_key(2))
    assert session is not None
    assert contents(session.messages) == ["first"]
    assert session.meta.session_key == "_main:telegram:2"


async def test_a_corrupt_meta_line_is_quarantined_and_rebuilt(store: SessionStore) -> None:
    path = await _seeded(store)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"garbage\n" + b"".join(lines[1:]))
    session = await store.load(chat_key(1))
    assert session is not None
    assert contents(session.messages) == contents(numbered(3))
    assert session.meta.session_key == "_main:telegram:1"
    assert b"garbage" in path.with_name("default.jsonl.corrupt").read_bytes()
    assert path.read_bytes().startswith(b'{"schema_version":1')


async def test_a_message_that_fills_the_tail_window_is_checked_whole(store: SessionStore) -> None:
    big = Message.user("x" * 300_000)
    await store.append(chat_key(3), big)
    store.release(chat_key(3))
    await store.append(chat_key(3), Message.user("after"))
    session = await store.load(chat_key(3))
    assert session is not None
    assert [len(m.content) for m in session.messages] == [300_000, 5]
    assert not store.path_for(chat_key(3)).with_name("default.jsonl.torn").exists()
