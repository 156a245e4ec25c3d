"""Telegram in webhook mode: updates arrive at the daemon's own HTTP server."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.conftest import running_daemon, stop_cleanly
from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import DaemonProcess

pytestmark = pytest.mark.slow

SECRET = "webhook-secret_123"
PATH = "/telegram/webhook"
ALICE, CHAT = 4201, 7001


def webhook_profile(fake: FakeTelegram) -> str:
    return f"""\
agent: {{type: echo}}
channels:
  - type: telegram
    token: "{fake.token}"
    base_url: {fake.base_url}
    base_file_url: {fake.base_file_url}
    mode: webhook
    webhook_url: https://bot.example.com{PATH}
    webhook_path: {PATH}
    secret_token: {SECRET}
    allow: [{ALICE}]
"""


def update(update_id: int, text: str) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": int(time.time()),
            "chat": {"id": CHAT, "type": "private", "first_name": "Alice"},
            "from": {"id": ALICE, "is_bot": False, "first_name": "Alice", "username": "alice"},
            "text": text,
        },
    }


async def post(daemon: DaemonProcess, body: dict[str, Any], secret: str | None) -> int:
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
    async with (
        aiohttp.ClientSession() as http,
        http.post(daemon.http_url + PATH, json=body, headers=headers) as response,
    ):
        return response.status


async def test_updates_posted_to_the_daemon_are_answered_and_forgeries_refused(
    tmp_path: Path,
) -> None:
    async with (
        FakeTelegram() as fake,
        running_daemon(tmp_path, {"hook": webhook_profile(fake)}) as daemon,
    ):
        await fake.wait_for_calls("setWebhook")
        (registered,) = fake.calls("setWebhook")
        assert registered.params["url"] == f"https://bot.example.com{PATH}"
        assert registered.params["secret_token"] == SECRET

        assert await post(daemon, update(1, "forged"), "wrong-secret") in (401, 403)
        assert await post(daemon, update(2, "unsigned"), None) in (401, 403)
        assert await post(daemon, update(3, "hello by webhook"), SECRET) == 200
        await fake.wait_until(lambda: len(fake.bot_messages(CHAT)) >= 1)
        # The same update delivered again (Telegram retries webhooks) is answered once.
        assert await post(daemon, update(3, "hello by webhook"), SECRET) == 200
        assert await post(daemon, update(4, "second"), SECRET) == 200
        await fake.wait_until(lambda: len(fake.bot_messages(CHAT)) >= 2)
        assert [m["text"] for m in fake.bot_messages(CHAT)] == ["hello by webhook", "second"]
        assert not fake.calls("getUpdates")
        assert await stop_cleanly(daemon) == 0
    assert fake.calls("deleteWebhook")
