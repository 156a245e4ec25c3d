"""The owner's sends in a cluster: `POST /v1/messages` on either of two processes reaches the
Telegram fake once (also posted twice with one key, to both), across a SIGKILL of the process
that answered 202; one scheduled 3 s ahead, taken by that process, is sent once by the other
when its time comes; `GET` on the survivor shows `sent` with the platform id, and the text is
in the chat's session; `DELETE` cancels a scheduled one."""

from __future__ import annotations

import asyncio
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.e2e.cluster_daemons import echo_on_telegram, processes, start_role
from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import DaemonProcess
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

USER = 4301
CHAT = 73_001
TOKEN = "cluster-owner-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: How long a status may take to become what the test waits for (a redelivery after a kill).
STATUS_WAIT_S = 60.0


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


async def status_becomes(daemon: DaemonProcess, message_id: str, wanted: str) -> dict[str, Any]:
    """The message's status as `daemon` answers it, once it is `wanted`."""
    deadline = asyncio.get_running_loop().time() + STATUS_WAIT_S
    while True:
        status, body = await call(daemon, "GET", f"/v1/messages/{message_id}")
        assert status == 200, body
        if body["status"] == wanted or asyncio.get_running_loop().time() > deadline:
            assert body["status"] == wanted, body
            return body
        await asyncio.sleep(0.1)


def texts(fake: FakeTelegram) -> list[str]:
    return [str(sent["text"]) for sent in fake.bot_messages(CHAT)]


async def session_contents(dsn: str, profile: str) -> list[str]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT m.message FROM octos_messages m "
            "JOIN octos_sessions s ON s.id = m.session_id WHERE s.scope = $1",
            profile,
        )
    finally:
        await connection.close()
    return [str(row["message"]) for row in rows]


async def test_sends_go_out_once_from_any_process_across_a_kill(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    async with FakeTelegram() as fake, processes() as running:
        config = echo_on_telegram(
            tmp_path,
            fake,
            profile,
            USER,
            prefix=nats_prefix,
            dsn=postgres_dsn,
            ack_wait_s=3.0,
            http_settings=f", token: {TOKEN}",
        )
        taker = await start_role(config, "all")
        running.append(taker)
        survivor = await start_role(config, "all")
        running.append(survivor)

        def send(text: str, **extra: Any) -> dict[str, Any]:
            return {
                "profile": profile,
                "channel": "telegram",
                "chat_id": CHAT,
                "text": text,
                **extra,
            }

        status, body = await call(taker, "POST", "/v1/messages", send("x"), headers={})
        assert status == 401, body
        later = datetime.now(UTC) + timedelta(seconds=3)
        status, scheduled = await call(
            taker, "POST", "/v1/messages", send("at three", send_at=later.isoformat())
        )
        assert (status, scheduled["status"]) == (202, "scheduled"), scheduled
        status, first = await call(
            taker, "POST", "/v1/messages", send("build 8812 passed", idempotency_key="b-8812")
        )
        assert (status, first["status"]) == (202, "queued"), first
        taker.signal(signal.SIGKILL)
        await taker.wait()
        # The same key on the other process: the first answer, nothing sent twice.
        status, again = await call(
            survivor, "POST", "/v1/messages", send("build 8812 passed", idempotency_key="b-8812")
        )
        assert (status, again) == (202, first)

        status, unrecorded = await call(
            survivor, "POST", "/v1/messages", send("not in the session", session="none")
        )
        assert (status, unrecorded["status"]) == (202, "queued")
        sent = await status_becomes(survivor, first["id"], "sent")
        on_time = await status_becomes(survivor, scheduled["id"], "sent")
        await status_becomes(survivor, unrecorded["id"], "sent")
        # Its taker was dead before its time: the survivor's worker published it.
        assert any(e.get("event") == "cluster.sends_published" for e in survivor.logs)
        assert texts(fake).count("build 8812 passed") == 1
        assert texts(fake).count("at three") == 1
        by_text = {str(m["text"]): str(m["message_id"]) for m in fake.bot_messages(CHAT)}
        assert sent["platform_ids"] == [by_text["build 8812 passed"]]
        assert on_time["platform_ids"] == [by_text["at three"]]
        # `session: append` (the default): the chat's session holds both as the assistant's.
        contents = await session_contents(postgres_dsn, profile)
        assert sum("build 8812 passed" in c for c in contents) == 1
        assert sum("at three" in c for c in contents) == 1
        assert not any("not in the session" in c for c in contents)

        # A scheduled one cancelled before its time is never sent.
        far = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        status, pending = await call(survivor, "POST", "/v1/messages", send("never", send_at=far))
        assert (status, pending["status"]) == (202, "scheduled")
        status, cancelled = await call(survivor, "DELETE", f"/v1/messages/{pending['id']}")
        assert (status, cancelled["status"]) == (200, "cancelled"), cancelled
        status, listed = await call(survivor, "GET", "/v1/messages?status=cancelled")
        assert [m["id"] for m in listed["messages"]] == [pending["id"]]
        # One already sent cannot be.
        status, refused = await call(survivor, "DELETE", f"/v1/messages/{first['id']}")
        assert status == 409, refused
        assert "never" not in texts(fake)
