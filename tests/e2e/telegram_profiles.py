"""Telegram profiles on the fake (by webhook or long polling), and updates posted to the
daemon's own HTTP server as Telegram posts them."""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import DaemonProcess

SECRET = "webhook-secret_123"
PATH = "/telegram/webhook"


def telegram_profile(
    fake: FakeTelegram,
    allow: int,
    *,
    pairing: bool = False,
    webhook: bool = True,
    path: str = PATH,
    secret: str = SECRET,
) -> str:
    """The echo agent behind Telegram, allowing the user `allow`: by webhook at `path`, or
    (`webhook=False`) by long polling."""
    mode = (
        f"""\
    mode: webhook
    webhook_url: https://bot.example.com{path}
    webhook_path: {path}
    secret_token: {secret}
"""
        if webhook
        else "    poll_timeout_s: 5\n"
    )
    return f"""\
agent: {{type: echo}}
channels:
  - type: telegram
    token: "{fake.token}"
    base_url: {fake.base_url}
    base_file_url: {fake.base_file_url}
{mode}    allow: [{allow}]
    pairing: {str(pairing).lower()}
"""


def polling_profile(
    fake: FakeTelegram,
    user: int,
    agent: str,
    *,
    edit_interval_s: float = 1.0,
    queue_mode: str = "followup",
) -> str:
    """`agent` behind Telegram by long polling on the fake, allowing `user`; a streamed reply is
    edited at most every `edit_interval_s` (its final waits for that slot too); followup
    unless asked otherwise, so that each message is answered on its own."""
    return f"""\
agent: {agent}
queue_mode: {queue_mode}
channels:
  - type: telegram
    token: "{fake.token}"
    base_url: {fake.base_url}
    base_file_url: {fake.base_file_url}
    poll_timeout_s: 2
    edit_interval_s: {edit_interval_s}
    allow: [{user}]
"""


def update(update_id: int, text: str, *, user_id: int, name: str) -> dict[str, Any]:
    """A private message from `user_id` (username `name` in lower case) in their own chat."""
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": int(time.time()),
            "chat": {"id": user_id, "type": "private", "first_name": name},
            "from": {"id": user_id, "is_bot": False, "first_name": name, "username": name.lower()},
            "text": text,
        },
    }


async def post(
    daemon: DaemonProcess, body: dict[str, Any], secret: str | None, path: str = PATH
) -> int:
    """POST an update to the daemon's webhook; the HTTP status it answered."""
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
    async with (
        aiohttp.ClientSession() as http,
        http.post(daemon.http_url + path, json=body, headers=headers) as response,
    ):
        return response.status
