"""A store written behind a write-ahead log: appends return once queued, failures surface at
`sync`, which the log calls before it drops anything, and keep surfacing until a restart."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from bus import Message, SessionKey
from sessions import SessionStore, SessionStoreClosed, SessionWriteError
from sessions.creator import HELPER_FROM_FILES, FileCreator, Made
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


class _CreatorSpy:
    """Counts the batches the helper process makes (`sessions.creator`), running them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, kill_first: bool = False) -> None:
        self.batches: list[int] = []
        real = FileCreator.make

        def make(creator: FileCreator, files: Sequence[tuple[Path, bytes]]) -> list[Made]:
            self.batches.append(len(files))
            if kill_first and len(self.batches) == 1:
                creator._process.kill()
                creator._process.wait()
            return real(creator, files)

        monkeypatch.setattr(FileCreator, "make", make)


async def _first_turns(store: SessionStore, chats: list[SessionKey], text: str) -> None:
    # No await gives the loop a turn in between: the writer gets them as one batch.
    for key in chats:
        await store.append_all(key, [Message.user(f"{text} {key.chat_id}")])


async def test_a_burst_of_new_chats_is_made_by_the_helper_as_the_writer_makes_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _CreatorSpy(monkeypatch)
    burst = _new_chats(HELPER_FROM_FILES * 3)
    alone = SessionKey.for_chat("p", "telegram", "alone")
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        await _first_turns(store, burst, "hello")
        await store.sync()
        assert spy.batches == [len(burst)]
        await _first_turns(store, [alone], "hello")  # one new chat: the writer makes it
        for key in [*burst, alone]:
            await store.append_all(key, [Message.assistant("again")])
        await store.sync()
    assert spy.batches == [len(burst)]
    made_by_writer = store.path_for(alone).read_bytes().splitlines()
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        for key in burst:
            lines = store.path_for(key).read_bytes().splitlines()
            assert len(lines) == len(made_by_writer) == 3
            meta = SessionMeta.model_validate_json(lines[0])
            assert meta.session_key == str(key)
            assert meta.title == f"hello {key.chat_id}"
            loaded = await store.load(key)
            assert loaded is not None
            assert [m.content for m in loaded.messages] == [f"hello {key.chat_id}", "again"]


async def test_a_file_the_helper_cannot_make_is_refused_and_the_others_are_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _CreatorSpy(monkeypatch)
    burst = _new_chats(HELPER_FROM_FILES)
    layout = SessionLayout(tmp_path)
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        blocked = store.path_for(burst[0]).parent.parent
        await store.append_all(SessionKey.for_chat("p", "telegram", "first"), [Message.user("x")])
        await store.sync()
        blocked.write_bytes(b"")  # not a directory: no sessions/ can be made in it
        await _first_turns(store, burst, "hello")
        with pytest.raises(SessionWriteError, match="Not a directory"):
            await store.sync()
    for key in burst[1:]:
        assert layout.path_for(key).read_bytes().count(b"\n") == 2


async def test_a_helper_that_dies_fails_its_batch_and_the_writer_makes_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _CreatorSpy(monkeypatch, kill_first=True)
    lost, later = _new_chats(HELPER_FROM_FILES * 2)[::2], _new_chats(HELPER_FROM_FILES * 2)[1::2]
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        await _first_turns(store, lost, "lost")
        # Which of them it made is unknown: the journal must keep them all.
        with pytest.raises(SessionWriteError, match="file creator"):
            await store.sync()
        await _first_turns(store, later, "later")
        with pytest.raises(SessionWriteError):
            await store.sync()
    assert spy.batches == [len(lost)]
    async with SessionStore(tmp_path, fsync="never", track_unsynced=True) as store:
        for key in later:
            loaded = await store.load(key)
            assert loaded is not None
            assert [m.content for m in loaded.messages] == [f"later {key.chat_id}"]
