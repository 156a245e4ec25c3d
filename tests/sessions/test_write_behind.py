"""A store written behind a write-ahead log: appends return once queued, failures surface at
`sync`, which the log calls before it drops anything, and keep surfacing until a restart."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from bus import Message, SessionKey
from sessions import SessionStore, SessionStoreClosed, SessionWriteError
from sessions.durable import SYNCFS_ABOVE, FileSystemSync
from sessions.layout import SessionLayout
from sessions.meta import SessionMeta

KEY = SessionKey.for_chat("p", "telegram", "1")


async def test_appends_are_on_disk_once_synced(tmp_path: Path) -> None:
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        for number in range(5):
            await store.append_all(KEY, [Message.user(f"m{number}")])
        await store.sync()
        loaded = await store.load(KEY)
    assert loaded is not None
    assert [m.content for m in loaded.messages] == [f"m{n}" for n in range(5)]


async def test_a_refused_write_behind_fails_every_sync_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        await store.append_all(KEY, [Message.user("kept")])
        await store.sync()

        def full(_fd: int, _data: bytes) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr("sessions.writer.write_all", full)
        # Queued, not waited for: the journal is the durable copy of this turn.
        await store.append_all(KEY, [Message.user("refused by the disk")])
        with pytest.raises(SessionWriteError, match="No space left on device"):
            await store.sync()
        monkeypatch.undo()
        await store.append_all(KEY, [Message.user("later")])
        # Which turns the refused write lost is not known here: the journal must keep them all.
        with pytest.raises(SessionWriteError):
            await store.sync()


def _disk_must_not_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a chat with no directory was looked for on disk")

    monkeypatch.setattr("sessions.store.load_session", refuse)


async def test_a_chat_that_never_talked_is_not_looked_for_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier = SessionKey.for_chat("p", "telegram", "known")
    async with SessionStore(tmp_path) as store:
        await store.append_all(earlier, [Message.user("from the last run")])
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        with monkeypatch.context() as patched:
            _disk_must_not_be_read(patched)
            assert await store.load(KEY) is None
        # A chat on disk when the store opened, and one it created since, are read from disk.
        known = await store.load(earlier)
        assert known is not None
        assert [m.content for m in known.messages] == ["from the last run"]
        await store.append_all(KEY, [Message.user("first words")])
        await store.sync()
        created = await store.load(KEY)
        assert created is not None
        assert [m.content for m in created.messages] == ["first words"]


async def test_a_chat_in_the_legacy_layout_is_still_found(tmp_path: Path) -> None:
    legacy = SessionLayout(tmp_path).legacy_path_for(KEY)
    legacy.parent.mkdir(parents=True)
    legacy.write_bytes(
        SessionMeta.new(KEY).to_line() + Message.user("from octos").to_json().encode() + b"\n"
    )
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        migrated = await store.load(KEY)
    assert migrated is not None
    assert [m.content for m in migrated.messages] == ["from octos"]


async def test_a_new_chat_s_file_is_made_by_the_writer_and_its_directories_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a new chat's file was opened through a thread of its own")

    synced: list[Path] = []
    monkeypatch.setattr("sessions.store.open_for_append", refuse)
    monkeypatch.setattr("sessions.durable.fsync_dir", synced.append)
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        await store.append_all(KEY, [Message.user("hello")])
        await store.append_all(KEY, [Message.assistant("hi")])
        await store.sync()
        loaded = await store.load(KEY)
    assert loaded is not None
    assert [m.content for m in loaded.messages] == ["hello", "hi"]
    assert loaded.meta.session_key == str(KEY)
    session_file = store.path_for(KEY)
    chat_dir = session_file.parent.parent
    # The file's directory, the chat's, users/ and the root: a new chat's entries are durable.
    assert {session_file.parent, chat_dir, chat_dir.parent, tmp_path} <= set(synced)


async def test_a_new_chat_s_refused_first_write_leaves_its_file_empty_and_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(_fd: int, _data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        monkeypatch.setattr("sessions.writer.write_all", full)
        await store.append_all(KEY, [Message.user("refused by the disk")])
        with pytest.raises(SessionWriteError, match="No space left on device"):
            await store.sync()
        # The meta line went with the refused line, and was undone with it.
        assert store.path_for(KEY).read_bytes() == b""
        monkeypatch.undo()
        await store.append_all(KEY, [Message.user("later")])
        with pytest.raises(SessionWriteError):
            await store.sync()
    first_line = store.path_for(KEY).read_bytes().split(b"\n", 1)[0]
    assert SessionMeta.model_validate_json(first_line).session_key == str(KEY)
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        loaded = await store.load(KEY)
    assert loaded is not None
    assert [m.content for m in loaded.messages] == ["later"]


async def test_appends_that_skip_the_lock_are_written_by_close_and_refused_after_it(
    tmp_path: Path,
) -> None:
    never_talked = SessionKey.for_chat("p", "telegram", "silent")
    store = SessionStore(tmp_path, fsync="never", track_unsynced=True)
    await store.open()
    await store.append_all(KEY, [Message.user("opens the file")])
    # The file is open and nobody holds its lock: these take the path without the lock.
    for number in range(3):
        await store.append_all(KEY, [Message.user(f"queued {number}"), Message.assistant("ok")])
    assert await store.load(never_talked) is None  # no directory: nothing looked for
    await store.close()
    lines = store.path_for(KEY).read_bytes().splitlines()
    assert [Message.from_json(line).content for line in lines[1:]] == [
        "opens the file",
        *(content for n in range(3) for content in (f"queued {n}", "ok")),
    ]
    with pytest.raises(SessionStoreClosed):
        await store.append_all(KEY, [Message.user("after close")])
    with pytest.raises(SessionStoreClosed):
        await store.load(never_talked)


def _new_chats(count: int) -> list[SessionKey]:
    return [SessionKey.for_chat("p", "telegram", f"new-{number}") for number in range(count)]


async def test_a_sync_after_many_new_chats_commits_their_file_system_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if FileSystemSync.opened(tmp_path) is None:
        pytest.skip("syncfs cannot stand in for each fsync on this system")
    fsynced: list[int] = []
    file_systems_synced: list[FileSystemSync] = []
    real_fsync, real_syncfs = os.fsync, FileSystemSync.sync

    def counted_fsync(fd: int) -> None:
        fsynced.append(fd)
        real_fsync(fd)

    def counted_syncfs(self: FileSystemSync) -> None:
        file_systems_synced.append(self)
        real_syncfs(self)

    monkeypatch.setattr("sessions.durable.os.fsync", counted_fsync)
    monkeypatch.setattr(FileSystemSync, "sync", counted_syncfs)
    chats = _new_chats(SYNCFS_ABOVE)
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        for key in chats:
            await store.append_all(key, [Message.user("first words")])
        await store.sync()
        # Not an fsync of each chat's file and of each of its two new directories.
        assert (len(fsynced), len(file_systems_synced)) == (0, 1)
        loaded = [await store.load(key) for key in chats]
    assert all(session is not None and len(session.messages) == 1 for session in loaded)


async def test_a_sync_whose_syncfs_fails_syncs_each_file_and_directory_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if FileSystemSync.opened(tmp_path) is None:
        pytest.skip("syncfs cannot stand in for each fsync on this system")

    def failed(_self: FileSystemSync) -> None:
        # As the kernel reports a write-back failure, perhaps another program's file.
        raise OSError(errno.EIO, "Input/output error")

    synced_directories: list[Path] = []
    monkeypatch.setattr(FileSystemSync, "sync", failed)
    monkeypatch.setattr("sessions.durable.fsync_dir", synced_directories.append)
    chats = _new_chats(SYNCFS_ABOVE)
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        for key in chats:
            await store.append_all(key, [Message.user("first words")])
        await store.sync()
    sessions_directories = {store.path_for(key).parent for key in chats}
    chat_directories = {directory.parent for directory in sessions_directories}
    assert sessions_directories | chat_directories <= set(synced_directories)


async def test_a_new_chat_s_first_append_takes_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:

        def refuse(_key: Path) -> None:
            raise AssertionError("a new chat's first append waited for its file's lock")

        monkeypatch.setattr(store._locks, "hold", refuse)
        await store.append_all(KEY, [Message.user("hello")])
        await store.append_all(KEY, [Message.assistant("hi")])
        monkeypatch.undo()
        await store.sync()
        loaded = await store.load(KEY)
    assert loaded is not None
    assert [m.content for m in loaded.messages] == ["hello", "hi"]
