"""A chat id the API channel's allow list refuses is answered at once, 403 with the notice, on
every request and streamed too: no request waits for a reply that will never come. A sender
`octos-gateway pair` approved is let in from the moment the command returns, with the files and
with PostgreSQL; the undo command it prints works from any directory."""

from __future__ import annotations

import re
import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged, session_keys
from tests.support.cli import run_cli
from tests.support.daemon import DaemonProcess, free_port, write_config
from tests.support.postgres import fresh_scope

pytestmark = [pytest.mark.slow]

CODE = re.compile(r"this code: ([A-Z0-9]{4}-[A-Z0-9]{4})")
UNDO = re.compile(r"\(undo with: (.+)\)$")


def api_profile(port: int, *, allow: str, pairing: bool = False) -> str:
    return f"""\
agent: {{type: echo}}
channels:
  - type: api
    port: {port}
    allow: {allow}
    pairing: {str(pairing).lower()}
"""


@asynccontextmanager
async def api_daemon(
    directory: Path, profiles: dict[str, str], *, store: str = ""
) -> AsyncIterator[DaemonProcess]:
    """The daemon, once its API channel takes requests (`store`: a line for gateway.yaml)."""
    config = write_config(directory, profiles)
    with config.open("a", encoding="utf-8") as text:
        text.write(store)
    daemon = DaemonProcess(config, env=DAEMON_ENV)
    try:
        await daemon.start()
        await daemon.wait_log(logged("api.web_chat_ready"))
        yield daemon
    finally:
        await daemon.stop()


class Client:
    """POST /v1/chat on one port; each request is given WAIT_S, far below `reply_timeout_s`
    (300 s), so one held for a reply fails the test instead of answering late."""

    def __init__(self, http: aiohttp.ClientSession, port: int) -> None:
        self._http = http
        self._url = f"http://127.0.0.1:{port}/v1/chat"

    async def chat(self, chat_id: str, content: str, *, stream: bool = False) -> tuple[int, Any]:
        body = {"chat_id": chat_id, "content": content, "stream": stream}
        async with self._http.post(self._url, json=body) as response:
            if response.content_type == "application/json":
                return response.status, await response.json()
            return response.status, await response.text()


@asynccontextmanager
async def client(port: int) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as http:
        yield Client(http, port)


def code_in(answer: Any) -> str:
    found = CODE.search(str(answer.get("error", "")))
    assert found, answer
    return found.group(1)


async def test_a_refused_chat_id_is_answered_403_at_once_every_time(tmp_path: Path) -> None:
    port = free_port()
    async with (
        api_daemon(tmp_path, {"main": api_profile(port, allow="[alice]")}) as daemon,
        client(port) as api,
    ):
        for attempt, stream in (("hi", False), ("hi again", False), ("streamed?", True)):
            status, answer = await api.chat("bob", attempt, stream=stream)
            assert status == 403, answer
            assert "Your id is bob: ask its owner to add it to the allow list" in answer["error"]
        assert await api.chat("alice", "hello") == (
            200,
            {"reply": "hello", "chat_id": "alice", "session": "main:api:alice"},
        )
        refused = await daemon.metric(
            "octos_messages_in_total", profile="main", channel="api", outcome="refused"
        )
        assert refused == 3
    assert not any("bob" in key for key in session_keys(tmp_path / "data"))


async def test_a_paired_sender_is_let_in_as_pair_returns_and_refused_again_after_undo(
    tmp_path: Path,
) -> None:
    port = free_port()
    profile = api_profile(port, allow="[]", pairing=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with api_daemon(tmp_path, {"main": profile}) as daemon, client(port) as api:
        status, answer = await api.chat("bob", "let me in")
        assert status == 403
        code = code_in(answer)
        # Asked again, the same pending code, at once (and streamed, as JSON before any event).
        status, again = await api.chat("bob", "please", stream=True)
        assert (status, code_in(again)) == (403, code)

        # `-c` as typed in the configuration's directory: relative.
        paired = await run_cli("pair", code, "-c", "gateway.yaml", cwd=tmp_path)
        assert paired.code == 0, paired.err
        # No wait for the daemon's own look at the overlay: `pair` has returned, that is all.
        assert await api.chat("bob", "hello") == (
            200,
            {"reply": "hello", "chat_id": "bob", "session": "main:api:bob"},
        )

        undo = UNDO.search(paired.out.strip())
        assert undo, paired.out
        program, *arguments = shlex.split(undo.group(1))
        assert program == "octos-gateway"
        assert arguments[:3] == ["allow", "remove", "bob"]
        reloads = daemon.count_logged("allow.overlay_reloaded")
        # Run where the owner may well be by then: another directory.
        removed = await run_cli(*arguments, cwd=elsewhere)
        assert removed.code == 0, removed.err
        assert removed.out == "removed: main api bob\n"
        await daemon.wait_logged("allow.overlay_reloaded", more_than=reloads)

        status, answer = await api.chat("bob", "still there?")
        assert status == 403
        assert code_in(answer) != code  # that one was used up


async def test_an_approval_the_daemon_was_not_yet_told_of_is_read_before_a_refusal(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """PostgreSQL tells the daemon of an approval by a notification, an instant after `pair`
    committed it; a message in that instant is let in all the same. The approval is written
    here without the notification: only the refusal's own read can find it."""
    profile, port = fresh_scope(), free_port()
    store = f'store: {{backend: postgres, dsn: "{postgres_dsn}"}}\n'
    async with (
        api_daemon(tmp_path, {profile: api_profile(port, allow="[]", pairing=True)}, store=store),
        client(port) as api,
    ):
        status, answer = await api.chat("bob", "let me in")
        assert status == 403
        code_in(answer)
        connection = await asyncpg.connect(postgres_dsn)
        try:
            await connection.execute(
                "INSERT INTO octos_allowed_senders (scope, channel, sender_id) "
                "VALUES ($1, 'api', 'bob')",
                profile,
            )
        finally:
            await connection.close()
        status, answer = await api.chat("bob", "hello")
        assert (status, answer["reply"]) == (200, "hello")
