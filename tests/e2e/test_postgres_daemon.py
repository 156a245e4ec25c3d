"""The daemon with `store: {backend: postgres}`: sessions in the real PostgreSQL, no files.

Answers a message and `sessions show` reads it back from the database; a SIGKILL in the
middle of a turn, then a restart: the message is answered once and stored once; an unreachable
server stops `run` at start-up with exit 69 and a message naming the DSN without its password.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import pytest

from tests.e2e.conftest import DAEMON_ENV, session_keys
from tests.support.cli import run_cli
from tests.support.daemon import DaemonProcess, free_port, write_config
from tests.support.postgres import fresh_scope, session_messages

ANSWER_TIMEOUT = aiohttp.ClientTimeout(total=20)


async def started(config: Path) -> DaemonProcess:
    """The daemon, once its web chat (the API channel) takes requests."""
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    await daemon.wait_log(lambda event: event.get("event") == "api.web_chat_ready")
    return daemon


class PostgresProfile(NamedTuple):
    """A profile no other test uses, its web chat (the API channel) on `port`, in a config whose
    store is PostgreSQL."""

    name: str
    port: int
    config: Path


def postgres_profile(directory: Path, dsn: str, *, delay_s: float = 0) -> PostgresProfile:
    profile, port = fresh_scope(), free_port()
    return PostgresProfile(profile, port, with_postgres(directory, profile, port, dsn, delay_s))


@asynccontextmanager
async def answering(config: Path) -> AsyncIterator[DaemonProcess]:
    """The daemon `started`, stopped on the way out whatever the test did."""
    daemon = await started(config)
    try:
        yield daemon
    finally:
        await daemon.stop()


def with_postgres(directory: Path, profile: str, api_port: int, dsn: str, delay_s: float) -> Path:
    config = write_config(
        directory,
        {
            profile: f"""\
            agent: {{type: echo, delay_s: {delay_s}}}
            channels:
              - type: api
                port: {api_port}
            """
        },
    )
    with config.open("a", encoding="utf-8") as text:
        text.write(f'store: {{backend: postgres, dsn: "{dsn}"}}\n')
    return config


async def chat(port: int, body: dict[str, Any]) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{port}/v1/chat", json=body, timeout=ANSWER_TIMEOUT) as r,
    ):
        assert r.status == 200, await r.text()
        answer: dict[str, Any] = await r.json()
        return answer


async def test_the_daemon_answers_and_sessions_show_reads_postgres(
    tmp_path: Path, postgres_dsn: str
) -> None:
    profile, port, config = postgres_profile(tmp_path, postgres_dsn)
    async with answering(config):
        answer = await chat(port, {"chat_id": "pg-1", "content": "hello postgres"})
        assert answer["reply"] == "hello postgres"
        key = f"{profile}:api:pg-1"
        assert await session_messages(postgres_dsn, profile, key) == [
            ("user", "hello postgres"),
            ("assistant", "hello postgres"),
        ]
        shown = await run_cli("sessions", "-c", str(config), "show", key, cwd=tmp_path)
        assert shown.code == 0, shown.err
        assert shown.out.splitlines()[0].endswith("user: hello postgres")
        assert shown.out.splitlines()[1].endswith("assistant: hello postgres")
        listed = await run_cli("sessions", "-c", str(config), "list", cwd=tmp_path)
        assert listed.code == 0, listed.err
        assert f"{key}\t2 messages\t" in listed.out
        # The web page's history reads the same rows.
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/v1/sessions/pg-1/messages") as r,
        ):
            history = (await r.json())["messages"]
        assert [m["content"] for m in history] == ["hello postgres", "hello postgres"]
    assert session_keys(tmp_path / "data") == set()  # no session file was written


async def test_a_sigkill_mid_turn_is_answered_once_after_the_restart(
    tmp_path: Path, postgres_dsn: str
) -> None:
    profile, port, config = postgres_profile(tmp_path, postgres_dsn, delay_s=3.0)
    body = {"chat_id": "pg-kill", "content": "survive this", "client_message_id": "kill-1"}
    daemon = await started(config)
    try:
        asking = asyncio.create_task(chat(port, body), name="first-request")
        await daemon.wait_log(lambda event: event.get("event") == "turn.started")
        daemon.signal(signal.SIGKILL)
        await daemon.wait()
        with pytest.raises(aiohttp.ClientError):
            await asking  # killed under the request
        daemon = await started(config)
        answer = await chat(port, body)  # the client retries with the same id
        assert answer["reply"] == "survive this"
        again = await chat(port, body)  # and once more: still one turn
        assert again["reply"] == "survive this"
    finally:
        await daemon.stop()
    assert await session_messages(postgres_dsn, profile, f"{profile}:api:pg-kill") == [
        ("user", "survive this"),
        ("assistant", "survive this"),
    ]


async def test_an_unreachable_postgres_stops_run_with_exit_69(tmp_path: Path) -> None:
    dsn = f"postgresql://octos:hunter2secret@127.0.0.1:{free_port()}/sessions"
    config = with_postgres(tmp_path, "main", free_port(), dsn, 0)
    result = await run_cli("run", "-c", str(config), cwd=tmp_path)
    assert result.code == 69, result.err
    assert "hunter2secret" not in result.err + result.out
    assert f"postgresql://octos:***@127.0.0.1:{dsn.rsplit(':', 1)[1]}" in result.err
    assert "check that the server runs" in result.err


async def test_a_reload_keeps_the_store_the_daemon_started_with(
    tmp_path: Path, postgres_dsn: str
) -> None:
    config = postgres_profile(tmp_path, postgres_dsn).config
    async with answering(config) as daemon:
        # The store is switched back to the files and a profile added, then SIGHUP.
        text = config.read_text(encoding="utf-8")
        config.write_text(text.replace("backend: postgres", "backend: jsonl"), encoding="utf-8")
        added, added_port = fresh_scope(), free_port()
        (tmp_path / "profiles" / f"{added}.yaml").write_text(
            f"channels: [{{type: api, port: {added_port}}}]\n", encoding="utf-8"
        )
        daemon.signal(signal.SIGHUP)
        await daemon.wait_log(lambda event: event.get("event") == "reload.store_unchanged")
        await daemon.wait_log(
            lambda event: event.get("event") == "profile.started" and event.get("profile") == added
        )
        await daemon.wait_log(
            lambda event: (
                event.get("event") == "api.web_chat_ready" and str(added_port) in str(event)
            )
        )
        answer = await chat(added_port, {"chat_id": "after-reload", "content": "still postgres"})
        assert answer["reply"] == "still postgres"
    assert await session_messages(postgres_dsn, added, f"{added}:api:after-reload") == [
        ("user", "still postgres"),
        ("assistant", "still postgres"),
    ]
    assert session_keys(tmp_path / "data") == set()
