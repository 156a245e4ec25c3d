"""Octos' legacy flat layout is read, migrated once (with its marker), and never destroyed."""

from __future__ import annotations

import shutil
from pathlib import Path

from bus import Message, SessionKey
from sessions import SessionStore
from sessions.layout import bounded_name
from sessions.meta import SessionMeta
from tests.sessions.conftest import chat_key, contents, numbered


def _write_legacy(root: Path, key: SessionKey, messages: list[Message]) -> Path:
    legacy = root / "sessions" / f"{bounded_name(str(key))}.jsonl"
    legacy.parent.mkdir(parents=True, exist_ok=True)
    # Octos writes fields we do not know; they must not stop the migration.
    meta = SessionMeta.new(key).to_json()[:-1] + ',"child_contracts":[]}'
    body = b"".join(message.to_json().encode() + b"\n" for message in messages)
    legacy.write_bytes(meta.encode() + b"\n" + body)
    return legacy


def _append_raw(path: Path, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)


async def test_a_legacy_session_is_migrated_on_first_open(tmp_path: Path) -> None:
    key = chat_key(1)
    legacy = _write_legacy(tmp_path, key, numbered(5))
    assert legacy.name == "_main%3Atelegram%3A1.jsonl"
    async with SessionStore(tmp_path) as store:
        listed = await store.list()
        assert [(str(info.key), info.message_count) for info in listed] == [(str(key), 5)]
        session = await store.load(key)
        assert session is not None
        assert contents(session.messages) == contents(numbered(5))
        await store.append(key, Message.user("message 5"))
        again = await store.load(key)
        listed_after = await store.list()
    assert again is not None
    assert contents(again.messages) == contents(numbered(6))
    live = tmp_path / "users" / "_main%3Atelegram%3A1" / "sessions" / "default.jsonl"
    assert live.exists()
    assert (live.parent / ".migrated.default").read_bytes() == b"migrated-from-flat\n"
    assert not legacy.exists()
    assert legacy.with_name(legacy.name + ".migrated").exists()
    assert [info.message_count for info in listed_after] == [6]


async def test_a_topic_and_a_cut_legacy_name_migrate_too(tmp_path: Path) -> None:
    key = SessionKey("telegram", "é" * 120, "_main", "notes")
    legacy = _write_legacy(tmp_path, key, numbered(2))
    assert legacy.stem.endswith(bounded_name(str(key))[-17:])
    async with SessionStore(tmp_path) as store:
        await store.append(key, Message.user("message 2"))
        session = await store.load(key)
    assert session is not None
    assert contents(session.messages) == contents(numbered(3))
    assert session.meta.topic == "notes"


async def test_an_interrupted_migration_is_finished_without_duplicates(tmp_path: Path) -> None:
    key = chat_key(2)
    legacy = _write_legacy(tmp_path, key, numbered(3))
    async with SessionStore(tmp_path) as store:
        await store.load(key)
    # As if the previous run copied the file but died before the marker and the move aside.
    shutil.copyfile(legacy.with_name(legacy.name + ".migrated"), legacy)
    (tmp_path / "users" / "_main%3Atelegram%3A2" / "sessions" / ".migrated.default").unlink()
    async with SessionStore(tmp_path) as store:
        session = await store.load(key)
        infos = await store.list()
    assert session is not None
    assert contents(session.messages) == contents(numbered(3))
    assert len(infos) == 1
    assert legacy.with_name(legacy.name + ".migrated.1").exists()


async def test_a_legacy_file_with_a_torn_tail_migrates_its_good_lines(tmp_path: Path) -> None:
    key = chat_key(3)
    legacy = _write_legacy(tmp_path, key, numbered(2))
    _append_raw(legacy, b'{"role":"assist')
    async with SessionStore(tmp_path) as store:
        session = await store.load(key)
    assert session is not None
    assert contents(session.messages) == contents(numbered(2))
    assert legacy.with_name(legacy.name + ".torn").exists()
