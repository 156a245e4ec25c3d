"""Size cap: compaction archives older messages, keeps a summary, and never loses one."""

from __future__ import annotations

from pathlib import Path

from bus import Message
from sessions import SessionStore, is_compaction_summary
from sessions.layout import archive_numbers, archive_path
from sessions.recovery import parse_message
from tests.sessions.conftest import chat_key, contents

CAP = 8 * 1024


def _messages_in(path: Path) -> list[Message]:
    lines = path.read_bytes().splitlines()[1:]
    parsed = [parse_message(line) for line in lines]
    assert all(message is not None for message in parsed)
    return [message for message in parsed if message is not None]


def _whole_history(live: Path) -> list[str]:
    """Every message ever appended, from the archives in order and then the live file."""
    files = [archive_path(live, number) for number in archive_numbers(live)] + [live]
    return [
        message.content
        for path in files
        for message in _messages_in(path)
        if not is_compaction_summary(message)
    ]


async def test_compaction_at_the_cap_keeps_every_message(tmp_path: Path) -> None:
    key = chat_key(1)
    sent = [f"message {index} " + "." * (index % 97) for index in range(600)]
    async with SessionStore(tmp_path, max_file_bytes=CAP) as store:
        for content in sent:
            await store.append(key, Message.user(content))
            assert store.path_for(key).stat().st_size <= CAP
        live = store.path_for(key)
        session = await store.load(key)
    assert len(archive_numbers(live)) >= 5
    assert _whole_history(live) == sent
    assert session is not None
    summary, *recent = session.messages
    assert is_compaction_summary(summary)
    last_archive = archive_path(live, archive_numbers(live)[-1]).name
    assert last_archive in summary.content
    assert contents(recent) == sent[-len(recent) :]
    assert sent[-1] in contents(recent)


async def test_archives_are_session_files_chained_by_their_summaries(tmp_path: Path) -> None:
    key = chat_key(2)
    async with SessionStore(tmp_path, max_file_bytes=CAP) as store:
        for index in range(400):
            await store.append(key, Message.user(f"{index:04d} " + "y" * 60))
        live = store.path_for(key)
    second = archive_path(live, 2)
    first_line = second.read_bytes().splitlines()[0]
    assert b'"session_key":"_main:telegram:2"' in first_line
    chained = _messages_in(second)[0]
    assert is_compaction_summary(chained)
    assert archive_path(live, 1).name in chained.content


async def test_a_message_larger_than_the_cap_is_kept(tmp_path: Path) -> None:
    key = chat_key(3)
    async with SessionStore(tmp_path, max_file_bytes=CAP) as store:
        await store.append(key, Message.user("small"))
        await store.append(key, Message.user("z" * (CAP * 2)))
        await store.append(key, Message.user("z" * (CAP * 2)))
        await store.append(key, Message.user("after"))
        session = await store.load(key)
        live = store.path_for(key)
    assert session is not None
    assert contents(session.messages)[-1] == "after"
    assert _whole_history(live) == ["small", "z" * (CAP * 2), "z" * (CAP * 2), "after"]


async def test_append_all_reports_a_compaction(tmp_path: Path) -> None:
    key = chat_key(4)
    async with SessionStore(tmp_path, max_file_bytes=CAP) as store:
        receipts = [
            await store.append_all(key, [Message.user("q" * 100), Message.assistant("a" * 100)])
            for _ in range(60)
        ]
    assert any(receipt.compacted for receipt in receipts)
    assert not receipts[0].compacted
