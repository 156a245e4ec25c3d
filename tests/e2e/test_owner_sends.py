"""The owner's sends end to end: `POST /v1/messages` (and `octos-gateway send`) on the daemon
subprocess, reaching the Telegram fake once, across retries with one key, a SIGKILL after the
202, and a restart that spans a scheduled message's time."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged
from tests.e2e.telegram_profiles import polling_profile
from tests.fakes.telegram_server import FakeTelegram
from tests.support.cli import run_cli
from tests.support.daemon import DaemonProcess, write_config

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

USER = 4201
TOKEN = "owner-token-1234"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
_chats = itertools.count(70_001)


def new_chat() -> int:
    return next(_chats)


def config_in(directory: Path, fake: FakeTelegram) -> Path:
    return write_config(
        directory,
        {"support": polling_profile(fake, USER, "{type: echo}")},
        http_settings=f", token: {TOKEN}",
    )


async def started(config: Path) -> DaemonProcess:
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    await daemon.wait_log(logged("profile.started"))
    return daemon


async def call(
    daemon: DaemonProcess,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method, daemon.http_url + path, json=body, headers=AUTH if headers is None else headers
        ) as response,
    ):
        return response.status, await response.json()


def message(chat: int, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "profile": "support",
        "channel": "telegram",
        "chat_id": str(chat),
        "text": text,
        **extra,
    }


def texts(fake: FakeTelegram, chat: int) -> list[str]:
    return [str(sent["text"]) for sent in fake.bot_messages(chat)]


async def sent_status(daemon: DaemonProcess, message_id: str) -> dict[str, Any]:
    """The message's status once the delivery hook reported how its delivery ended."""
    await daemon.wait_log(
        lambda event: event.get("event") == "outbox.ended" and event.get("id") == message_id
    )
    status, body = await call(daemon, "GET", f"/v1/messages/{message_id}")
    assert status == 200
    return body


def session_texts(data_dir: Path, chat: int) -> list[tuple[str, str]]:
    """(role, content) of every message in the sessions of `chat`."""
    found: list[tuple[str, str]] = []
    for path in sorted(data_dir.rglob("*.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()
        if not lines or f":{chat}" not in json.loads(lines[0]).get("session_key", ""):
            continue
        for line in lines[1:]:
            entry = json.loads(line)
            if "role" in entry:
                found.append((entry["role"], entry["content"]))
    return found


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as telegram:
        yield telegram


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def daemon(
    fake: FakeTelegram, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[DaemonProcess]:
    running = await started(config_in(tmp_path_factory.mktemp("owner-sends"), fake))
    try:
        yield running
    finally:
        await running.stop()


async def test_without_the_token_it_is_401(daemon: DaemonProcess) -> None:
    status, body = await call(daemon, "POST", "/v1/messages", message(1, "hi"), headers={})
    assert status == 401
    assert "bearer token" in body["error"]
    wrong = {"Authorization": "Bearer nope"}
    assert (await call(daemon, "GET", "/v1/messages/x", headers=wrong))[0] == 401


async def test_a_message_posted_twice_with_one_key_reaches_telegram_once(
    daemon: DaemonProcess, fake: FakeTelegram
) -> None:
    chat = new_chat()
    body = message(chat, "Build 8812 finished", idempotency_key="build-8812")
    first = await call(daemon, "POST", "/v1/messages", body)
    again = await call(daemon, "POST", "/v1/messages", body)
    assert first[0] == again[0] == 202
    assert first[1]["status"] == "queued"
    assert again[1] == first[1]
    ended = await sent_status(daemon, first[1]["id"])
    assert texts(fake, chat) == ["Build 8812 finished"]
    shown = fake.bot_messages(chat)[0]
    assert ended["status"] == "sent"
    assert ended["platform_ids"] == [str(shown["message_id"])]
    assert ended["error"] is None
    # Sent: too late to cancel; and a third post with the key still sends nothing.
    assert (await call(daemon, "DELETE", f"/v1/messages/{first[1]['id']}"))[0] == 409
    assert (await call(daemon, "POST", "/v1/messages", body))[1]["id"] == first[1]["id"]
    assert texts(fake, chat) == ["Build 8812 finished"]


async def test_a_sent_message_is_in_the_session_the_next_turn_reads(
    daemon: DaemonProcess, fake: FakeTelegram
) -> None:
    chat = new_chat()
    _status, body = await call(daemon, "POST", "/v1/messages", message(chat, "Reminder: 9:00"))
    await sent_status(daemon, body["id"])
    _status, quiet = await call(
        daemon, "POST", "/v1/messages", message(chat, "not kept", session="none")
    )
    await sent_status(daemon, quiet["id"])
    fake.push_message(chat, "thanks", user_id=USER)
    await fake.wait_for_calls(
        "sendMessage", where=lambda r: r.params.get("text") == "thanks" and _to(chat, r.params)
    )
    data_dir = daemon.config.parent / "data"
    # The echo agent's turn wrote its session behind the sent text.
    for _attempt in range(int(WAIT_S * 10)):
        if ("assistant", "thanks") in session_texts(data_dir, chat):
            break
        await daemon.wait_log(logged("turn.done"))
    assert session_texts(data_dir, chat)[:3] == [
        ("assistant", "Reminder: 9:00"),
        ("user", "thanks"),
        ("assistant", "thanks"),
    ]


def _to(chat: int, params: dict[str, Any]) -> bool:
    return str(params.get("chat_id")) == str(chat)


async def test_a_refused_message_is_failed_with_the_platforms_reason(
    daemon: DaemonProcess, fake: FakeTelegram
) -> None:
    fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
    _status, body = await call(daemon, "POST", "/v1/messages", message(new_chat(), "hello?"))
    ended = await sent_status(daemon, body["id"])
    assert ended["status"] == "failed"
    assert "blocked" in ended["error"]
    assert ended["platform_ids"] == []


async def test_a_scheduled_message_can_be_listed_and_cancelled(
    daemon: DaemonProcess, fake: FakeTelegram
) -> None:
    chat = new_chat()
    later = datetime.fromtimestamp(time.time() + 3600, UTC).isoformat()
    status, body = await call(
        daemon, "POST", "/v1/messages", message(chat, "in an hour", send_at=later)
    )
    assert (status, body["status"]) == (202, "scheduled")
    _status, listed = await call(daemon, "GET", "/v1/messages?status=scheduled")
    assert body["id"] in [m["id"] for m in listed["messages"]]
    status, cancelled = await call(daemon, "DELETE", f"/v1/messages/{body['id']}")
    assert (status, cancelled["status"]) == (200, "cancelled")
    assert (await call(daemon, "GET", f"/v1/messages/{body['id']}"))[1]["status"] == "cancelled"
    assert texts(fake, chat) == []


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"attachments": [{"url": "https://x/y.png"}]}, "attachments are not supported yet"),
        ({"buttons": [{"text": "ok"}]}, "buttons are not supported yet"),
        ({"send_at": "2026-12-05T09:00:00"}, "send_at"),
        ({"session": "sometimes"}, "session"),
        ({"text": ""}, "text"),
        ({"colour": "blue"}, "colour"),
        ({"profile": "sales"}, "no profile 'sales'"),
        ({"channel": "slack"}, "no channel 'slack'"),
    ],
)
async def test_a_request_it_cannot_take_is_refused_and_says_why(
    daemon: DaemonProcess, change: dict[str, Any], said: str
) -> None:
    status, body = await call(daemon, "POST", "/v1/messages", {**message(1, "x"), **change})
    assert status in (400, 404)
    assert said in body["error"]


async def test_the_cli_sends_lists_and_cancels(daemon: DaemonProcess, fake: FakeTelegram) -> None:
    chat = new_chat()
    config, here = str(daemon.config), daemon.config.parent
    base = ["-c", config, "--profile", "support", "--channel", "telegram", "--chat", str(chat)]
    sent = await run_cli("send", *base, "--key", "cli-1", "from the CLI", cwd=here)
    assert sent.code == 0, sent.err
    message_id, status = sent.out.split()
    assert status == "queued"
    await sent_status(daemon, message_id)
    assert texts(fake, chat) == ["from the CLI"]
    later = await run_cli("send", *base, "--at", "2099-01-01T09:00", "far ahead", cwd=here)
    scheduled_id, status = later.out.split()
    assert status == "scheduled"
    listed = await run_cli("scheduled", "list", "-c", config, cwd=here)
    assert scheduled_id in listed.out
    cancelled = await run_cli("scheduled", "cancel", scheduled_id, "-c", config, cwd=here)
    assert cancelled.out.split() == [scheduled_id, "cancelled"]
    listed = await run_cli("scheduled", "list", "-c", config, cwd=here)
    assert scheduled_id not in listed.out
    assert texts(fake, chat) == ["from the CLI"]


async def test_a_message_is_sent_once_across_a_sigkill_after_the_202(tmp_path: Path) -> None:
    async with FakeTelegram() as fake:
        config = config_in(tmp_path, fake)
        daemon = await started(config)
        chat = new_chat()
        try:
            # Telegram fails every try (a retry can help), so nothing is shown before the kill.
            fake.fail_next("sendMessage", 502, "Bad Gateway", times=10_000)
            body = message(chat, "survives a kill", idempotency_key="kill-1")
            status, answer = await call(daemon, "POST", "/v1/messages", body)
            assert (status, answer["status"]) == (202, "queued")
            await fake.wait_for_calls("sendMessage", where=lambda r: _to(chat, r.params))
            daemon.signal(signal.SIGKILL)
            await daemon.wait()
            fake.recover("sendMessage")
            daemon = await started(config)
            ended = await sent_status(daemon, answer["id"])
            assert ended["status"] == "sent"
            # The key still names it after the restart.
            assert (await call(daemon, "POST", "/v1/messages", body))[1] == answer
            assert await daemon.stop_cleanly() == 0
            assert texts(fake, chat) == ["survives a kill"]
        finally:
            await daemon.stop()


async def test_a_scheduled_message_is_sent_once_after_a_restart_spanning_its_time(
    tmp_path: Path,
) -> None:
    async with FakeTelegram() as fake:
        config = config_in(tmp_path, fake)
        daemon = await started(config)
        chat = new_chat()
        try:
            due = time.time() + 3
            body = message(
                chat, "at its time", send_at=datetime.fromtimestamp(due, UTC).isoformat()
            )
            status, answer = await call(daemon, "POST", "/v1/messages", body)
            assert (status, answer["status"]) == (202, "scheduled")
            daemon.signal(signal.SIGKILL)
            await daemon.wait()
            # Down while its time passes: the restart spans it (what is awaited is the clock).
            await asyncio.sleep(max(0.0, due - time.time()) + 0.2)
            daemon = await started(config)
            late = await daemon.wait_log(logged("outbox.sent_late"))
            assert late["id"] == answer["id"]
            ended = await sent_status(daemon, answer["id"])
            assert ended["status"] == "sent"
            assert await daemon.stop_cleanly() == 0
            assert texts(fake, chat) == ["at its time"]
            # And once: a further restart sends nothing again.
            daemon = await started(config)
            assert (await call(daemon, "GET", f"/v1/messages/{answer['id']}"))[1] == ended
            assert await daemon.stop_cleanly() == 0
            assert texts(fake, chat) == ["at its time"]
        finally:
            await daemon.stop()
