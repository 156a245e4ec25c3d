"""`octos-gateway store migrate --from jsonl --to postgres`: counts, idempotent, resumable.

Session files of two profiles (topics, an archived session) are copied into the real
PostgreSQL; a second run copies nothing; a run SIGKILLed part-way is finished by the next one,
each session copied exactly once; a file that grew after its copy gets only its new messages
appended by the next run; `sessions show` then reads the copy from the database.
"""

from __future__ import annotations

import asyncio
import signal
import textwrap
from pathlib import Path

import asyncpg

from bus import Message, SessionKey
from channels.access.allow import AllowOverlay
from sessions import ActiveTopics, SessionStore
from tests.support.cli import run_cli, started_cli
from tests.support.postgres import own_database_dsn

__all__ = ["own_database_dsn"]  # the fixture

MANY = 300


def migrate_to_postgres(config: Path) -> tuple[str, ...]:
    """The command line every test here runs: the files of `config` copied into its store."""
    return ("store", "migrate", "--from", "jsonl", "--to", "postgres", "-c", str(config))


def gateway_yaml(directory: Path, dsn: str) -> Path:
    config = directory / "gateway.yaml"
    (directory / "profiles").mkdir(exist_ok=True)
    (directory / "profiles" / "work.yaml").write_text("channels: [{type: api, port: 0}]\n")
    config.write_text(
        textwrap.dedent(
            f"""\
            data_dir: data
            profiles_dir: profiles
            store: {{backend: postgres, dsn: "{dsn}"}}
            """
        )
    )
    return config


async def write_sessions(data_dir: Path) -> None:
    async with SessionStore(data_dir / "work") as store:
        key = SessionKey.parse("work:telegram:42")
        await store.append_all(key, [Message.user("hello"), Message.assistant("hi there")])
        await store.append_all(key.with_topic("travel"), [Message.user("trains to Lyon?")])
        old = SessionKey.parse("work:telegram:7")
        await store.append_all(old, [Message.user("before the reset")])
        await store.archive(old)
        await store.append_all(old, [Message.user("after the reset")])
    async with SessionStore(data_dir / "home") as store:
        await store.append_all(SessionKey.parse("home:api:web-1"), [Message.user("from home")])
    # The chat of work:telegram:42 is on its `travel` topic.
    await ActiveTopics(data_dir / "work").switch("work:telegram:42", "travel")
    # A stranger was approved by pairing.
    await asyncio.to_thread(AllowOverlay(data_dir / "work").add, "telegram", "66")


async def active_topics(dsn: str) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch("SELECT * FROM octos_active_topics")
    finally:
        await connection.close()
    return {(row["scope"], row["base_key"]): (row["active"], row["previous"]) for row in rows}


async def live_sessions(dsn: str) -> dict[str, int]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT session_key, message_count FROM octos_sessions WHERE archived_at IS NULL"
        )
    finally:
        await connection.close()
    return {row["session_key"]: row["message_count"] for row in rows}


async def test_migrate_copies_every_profile_and_topic_once(
    tmp_path: Path, own_database_dsn: str
) -> None:
    dsn = own_database_dsn
    config = gateway_yaml(tmp_path, dsn)
    await write_sessions(tmp_path / "data")
    args = migrate_to_postgres(config)
    first = await run_cli(*args, cwd=tmp_path)
    assert first.code == 0, first.err
    assert (
        "4 sessions copied, 0 already copied, 0 caught up (5 messages written), the active "
        "topic of 1 chat copied, 1 sender approved by pairing copied, 0 problems" in first.out
    )
    assert await active_topics(dsn) == {("work", "work:telegram:42"): ("travel", "")}
    approved = await run_cli("allow", "list", "-c", str(config), cwd=tmp_path)
    assert approved.out.startswith("work\ttelegram\t66\tadded "), approved.err
    assert await live_sessions(dsn) == {
        "work:telegram:42": 2,
        "work:telegram:42#travel": 1,
        "work:telegram:7": 1,
        "home:api:web-1": 1,
    }
    second = await run_cli(*args, cwd=tmp_path)
    assert second.code == 0, second.err
    assert (
        "0 sessions copied, 4 already copied, 0 caught up (0 messages written), 0 problems"
        in second.out
    )
    archives = await run_cli(*args, "--archives", cwd=tmp_path)
    assert archives.code == 0, archives.err
    assert "4 already copied, 0 caught up (1 message written), 1 archive copied" in archives.out
    shown = await run_cli("sessions", "-c", str(config), "show", "work:telegram:42", cwd=tmp_path)
    assert shown.code == 0, shown.err
    assert shown.out.splitlines()[1].endswith("assistant: hi there")
    listed = await run_cli("sessions", "-c", str(config), "list", "--profile", "home", cwd=tmp_path)
    assert "home:api:web-1\t1 message\t" in listed.out
    assert await live_sessions(dsn) == {
        "work:telegram:42": 2,
        "work:telegram:42#travel": 1,
        "work:telegram:7": 1,
        "home:api:web-1": 1,
    }


async def test_a_killed_migration_is_finished_by_the_next_run(
    tmp_path: Path, own_database_dsn: str
) -> None:
    dsn = own_database_dsn
    config = gateway_yaml(tmp_path, dsn)
    async with SessionStore(tmp_path / "data" / "bulk") as store:
        for chat in range(MANY):
            key = SessionKey.parse(f"bulk:telegram:{chat}")
            await store.append_all(key, [Message.user(f"q {chat}"), Message.assistant("a")])
    process = await started_cli(*migrate_to_postgres(config), cwd=tmp_path)
    assert process.stdout is not None
    copied_lines = 0
    while copied_lines < 10:
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line, "the migration ended before it copied 10 sessions"
        copied_lines += line.startswith(b"copied ")
    process.send_signal(signal.SIGKILL)
    await asyncio.wait_for(process.wait(), 60)
    partial = await live_sessions(dsn)
    assert 10 <= len(partial) < MANY, "the kill landed after the run ended"
    resumed = await run_cli(*migrate_to_postgres(config), cwd=tmp_path)
    assert resumed.code == 0, resumed.err
    assert f"{MANY - len(partial)} sessions copied" in resumed.out
    assert f"{len(partial)} already copied" in resumed.out
    finished = await live_sessions(dsn)
    assert finished == {f"bulk:telegram:{chat}": 2 for chat in range(MANY)}


async def test_a_file_that_grew_since_its_copy_is_caught_up(
    tmp_path: Path, own_database_dsn: str
) -> None:
    config = gateway_yaml(tmp_path, own_database_dsn)
    key = SessionKey.parse("work:telegram:9")
    async with SessionStore(tmp_path / "data" / "work") as store:
        await store.append_all(key, [Message.user("one"), Message.assistant("two")])
    args = migrate_to_postgres(config)
    assert (await run_cli(*args, cwd=tmp_path)).code == 0
    # The daemon still ran on the files meanwhile: the session grew.
    async with SessionStore(tmp_path / "data" / "work") as store:
        await store.append_all(key, [Message.user("three"), Message.assistant("four")])
    again = await run_cli(*args, cwd=tmp_path)
    assert again.code == 0, again.err
    assert "caught up work/" in again.out
    assert "0 sessions copied, 0 already copied, 1 caught up (2 messages written)" in again.out
    third = await run_cli(*args, cwd=tmp_path)
    assert "0 sessions copied, 1 already copied, 0 caught up (0 messages written)" in third.out
    shown = await run_cli("sessions", "-c", str(config), "show", str(key), cwd=tmp_path)
    assert [line.split("] ", 1)[1] for line in shown.out.splitlines()] == [
        "user: one",
        "assistant: two",
        "user: three",
        "assistant: four",
    ]
