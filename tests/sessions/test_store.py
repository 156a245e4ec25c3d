"""SessionStore: file format, appends, whole-file operations, listing, typed refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bus import Message, SessionKey
from sessions import (
    EmptyRewriteRefused,
    Session,
    SessionError,
    SessionExists,
    SessionKeyCollision,
    SessionStore,
    SessionStoreClosed,
    UnsupportedSessionSchema,
)
from sessions.meta import SessionMeta
from tests.sessions.conftest import chat_key, contents, numbered


async def test_first_line_is_the_meta_then_one_message_per_line(store: SessionStore) -> None:
    key = chat_key(1)
    await store.append(key, Message.user("  what is the weather like on the moon today?  "))
    await store.append(key, Message.assistant("cold"))
    lines = store.path_for(key).read_text().splitlines()
    meta = json.loads(lines[0])
    assert list(meta) == ["schema_version", "session_key", "title", "created_at", "updated_at"]
    assert meta["schema_version"] == 1
    assert meta["session_key"] == "_main:telegram:1"
    assert meta["title"] == "what is the weather like on the moon today?"
    assert [Message.from_json(line).content for line in lines[1:]] == [
        "  what is the weather like on the moon today?  ",
        "cold",
    ]


async def test_appended_messages_load_back_in_order(store: SessionStore) -> None:
    key = chat_key(2, "research")
    for message in numbered(50):
        await store.append(key, message)
    session = await store.load(key)
    assert session is not None
    assert session.key == key
    assert session.meta.topic == "research"
    assert contents(session.messages) == contents(numbered(50))
    assert store.path_for(key).name == "research.jsonl"


async def test_messages_given_with_their_lines_are_written_as_those_lines(
    store: SessionStore,
) -> None:
    key = chat_key("lines")
    turn = [Message.user("two\nlines"), Message.assistant("ok")]
    await store.append_all(key, turn, lines=Message.lines_of(turn))
    await store.sync()
    assert store.path_for(key).read_bytes().split(b"\n", 1)[1] == Message.lines_of(turn)
    session = await store.load(key)
    assert session is not None
    assert session.messages == turn


async def test_appends_continue_after_a_load_and_a_reopen(tmp_path: Path) -> None:
    key = chat_key(3)
    async with SessionStore(tmp_path, fsync="always") as store:
        await store.append_all(key, numbered(3))
        assert await store.load(key) is not None
        await store.append(key, Message.user("message 3"))
    async with SessionStore(tmp_path, fsync="never") as store:
        await store.append(key, Message.user("message 4"))
        session = await store.load(key)
    assert session is not None
    assert contents(session.messages) == contents(numbered(5))


async def test_a_missing_session_loads_as_none_and_creates_nothing(store: SessionStore) -> None:
    assert await store.load(chat_key(4)) is None
    assert not store.path_for(chat_key(4)).exists()
    assert await store.list() == []


async def test_rewrite_replaces_the_file_atomically(store: SessionStore) -> None:
    key = chat_key(5)
    await store.append_all(key, numbered(10))
    session = await store.load(key)
    assert session is not None
    session.messages = session.messages[5:]
    session.meta = session.meta.model_copy(update={"summary": "the second half"})
    await store.rewrite(session)
    await store.append(key, Message.user("after"))
    reloaded = await store.load(key)
    assert reloaded is not None
    assert reloaded.meta.summary == "the second half"
    assert contents(reloaded.messages) == [*contents(numbered(5, 5)), "after"]
    assert [p.name for p in store.path_for(key).parent.iterdir()] == ["default.jsonl"]


async def test_rewrite_never_replaces_history_with_an_empty_session(store: SessionStore) -> None:
    key = chat_key(6)
    await store.append_all(key, numbered(2))
    with pytest.raises(EmptyRewriteRefused, match="archive it instead"):
        await store.rewrite(Session.new(key))
    reloaded = await store.load(key)
    assert reloaded is not None
    assert len(reloaded.messages) == 2


async def test_fork_copies_the_last_messages_and_records_its_parent(store: SessionStore) -> None:
    parent, child = chat_key(7), chat_key(7, "branch")
    await store.append_all(parent, numbered(10))
    forked = await store.fork(parent, child, 3)
    assert forked.meta.parent_key == str(parent)
    assert forked.parent_key == parent
    assert contents(forked.messages) == contents(numbered(3, 7))
    reloaded = await store.load(child)
    assert reloaded is not None
    assert contents(reloaded.messages) == contents(numbered(3, 7))
    assert reloaded.meta.parent_key == "_main:telegram:7"
    with pytest.raises(SessionExists):
        await store.fork(parent, child, 3)


async def test_fork_of_a_session_without_history_starts_empty(store: SessionStore) -> None:
    forked = await store.fork(chat_key(8), chat_key(8, "fresh"), 5)
    assert forked.messages == []
    assert store.path_for(chat_key(8, "fresh")).exists()


async def test_archive_moves_the_file_aside_and_keeps_it(store: SessionStore) -> None:
    key = chat_key(9)
    await store.append_all(key, numbered(4))
    archived = await store.archive(key)
    assert archived is not None
    assert archived.name.startswith("default.")
    assert archived.name.endswith(".archived.jsonl")
    assert len(archived.read_text().splitlines()) == 5
    assert await store.load(key) is None
    assert await store.archive(key) is None
    await store.append(key, Message.user("again"))
    session = await store.load(key)
    assert session is not None
    assert contents(session.messages) == ["again"]


async def test_list_reports_each_session_without_side_files(store: SessionStore) -> None:
    await store.append_all(chat_key(10), numbered(3))
    await store.append_all(chat_key(10, "work"), numbered(5))
    await store.append_all(chat_key(11), numbered(1))
    await store.archive(chat_key(11))
    await store.append_all(chat_key(11), numbered(2))
    infos = {str(info.key): info for info in await store.list()}
    assert set(infos) == {"_main:telegram:10", "_main:telegram:10#work", "_main:telegram:11"}
    work = infos["_main:telegram:10#work"]
    assert (work.topic, work.message_count) == ("work", 5)
    assert work.size == store.path_for(chat_key(10, "work")).stat().st_size
    assert infos["_main:telegram:11"].message_count == 2
    mine = await store.list("_main:telegram:10")
    assert sorted((info.topic or "", info.message_count) for info in mine) == [("", 3), ("work", 5)]


async def test_hostile_keys_are_stored_under_the_root(store: SessionStore) -> None:
    hostile = [
        SessionKey("telegram", "../../etc/passwd"),
        SessionKey("telegram", "/abs", "%2F", "../up"),
        SessionKey("telegram", "ключ/🙂", None, "%"),
        SessionKey("telegram", "x" * 10_000, None, "y" * 300),
    ]
    for index, key in enumerate(hostile):
        await store.append(key, Message.user(f"hostile {index}"))
    root = store.root.resolve()
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) == len(hostile)
    assert all(p.resolve().is_relative_to(root) for p in files)
    for index, key in enumerate(hostile):
        session = await store.load(key)
        assert session is not None
        assert contents(session.messages) == [f"hostile {index}"]
    listed = {info.key.base_key() for info in await store.list()}
    assert listed == {key.base_key() for key in hostile}


async def test_a_future_schema_is_refused_with_the_version_this_build_reads(
    store: SessionStore,
) -> None:
    key = chat_key(12)
    path = store.path_for(key)
    path.parent.mkdir(parents=True)
    meta = SessionMeta.new(key).model_copy(update={"schema_version": 7}).to_json()
    original = meta.encode() + b"\n" + Message.user("from the future").to_json().encode() + b"\n"
    path.write_bytes(original)
    with pytest.raises(UnsupportedSessionSchema, match=r"schema_version 7.*reads schema_version 1"):
        await store.load(key)
    with pytest.raises(UnsupportedSessionSchema) as refused:
        await store.append(key, Message.user("mine"))
    assert (refused.value.found, refused.value.supported) == (7, 1)
    assert path.read_bytes() == original


async def test_a_cut_name_shared_by_another_key_is_refused(store: SessionStore) -> None:
    key = SessionKey("telegram", "z" * 400)
    path = store.path_for(key)
    path.parent.mkdir(parents=True)
    stranger = SessionMeta.new(SessionKey("telegram", "someone else")).to_line()
    path.write_bytes(stranger)
    with pytest.raises(SessionKeyCollision):
        await store.append(key, Message.user("mine"))
    assert path.read_bytes() == stranger


async def test_a_closed_store_says_so(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    with pytest.raises(SessionStoreClosed, match="async with"):
        await store.append(chat_key(1), Message.user("too early"))
    async with store:
        pass
    with pytest.raises(SessionStoreClosed):
        await store.load(chat_key(1))


async def test_open_descriptors_stay_bounded(tmp_path: Path) -> None:
    async with SessionStore(tmp_path, fsync="never", max_open_files=4) as store:
        for chat in range(20):
            await store.append(chat_key(chat), Message.user("hi"))
            assert store.open_file_count <= 4
        for chat in range(20):
            await store.append(chat_key(chat), Message.user("again"))
        sessions = [await store.load(chat_key(chat)) for chat in range(20)]
    assert all(s is not None and contents(s.messages) == ["hi", "again"] for s in sessions)


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="fsync"):
        SessionStore(Path("x"), fsync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_file_bytes"):
        SessionStore(Path("x"), max_file_bytes=10)


async def test_a_read_only_store_reads_without_repairing_or_writing(tmp_path: Path) -> None:
    key = chat_key(13)
    async with SessionStore(tmp_path) as store:
        await store.append_all(key, numbered(3))
        path = store.path_for(key)
    _append_raw(path, b'{"role":"user","content":"in fli')
    before = path.read_bytes()
    async with SessionStore(tmp_path, read_only=True) as reader:
        session = await reader.load(key)
        assert [info.message_count for info in await reader.list()] == [3]
        with pytest.raises(SessionError, match="read-only"):
            await reader.append(key, Message.user("no"))
        with pytest.raises(SessionError, match="read-only"):
            await reader.archive(key)
        with pytest.raises(SessionError, match="read-only"):
            await reader.fork(key, chat_key(13, "child"), 1)
    assert session is not None
    assert contents(session.messages) == contents(numbered(3))
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["default.jsonl"]


async def test_a_read_only_store_reads_an_unmigrated_legacy_file(tmp_path: Path) -> None:
    key = chat_key(14)
    legacy = tmp_path / "sessions" / "_main%3Atelegram%3A14.jsonl"
    legacy.parent.mkdir(parents=True)
    line = Message.user("old").to_json().encode() + b"\n"
    legacy.write_bytes(SessionMeta.new(key).to_line() + line)
    async with SessionStore(tmp_path, read_only=True) as reader:
        session = await reader.load(key)
    assert session is not None
    assert contents(session.messages) == ["old"]
    assert not (tmp_path / "users").exists()
    assert legacy.exists()


def _append_raw(path: Path, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)
