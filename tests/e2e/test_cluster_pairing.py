"""Pairing across ingress processes: a stranger gets a code from one ingress, `octos-gateway
pair` approves it, and every ingress lets them in within seconds.

The codes and the allow-list overlay are files in the profile's data directory, which every
ingress of a cluster shares (docker-compose.cluster.yml mounts one `gateway-data` volume at
/data in each; here all processes use the test's data directory). Each ingress notices the
overlay's change by itself (`allow.overlay_reloaded`)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.conftest import count_logged, wait_logged
from tests.fakes.telegram_server import FakeTelegram
from tests.support.cli import run_cli
from tests.support.daemon import DaemonProcess
from tests.support.nats import nats_prefix
from tests.support.postgres import fresh_scope, postgres_dsn

__all__ = ["nats_prefix", "postgres_dsn"]  # the fixtures

pytestmark = pytest.mark.slow

OWNER, STRANGER = 4201, 6666
SECRET = "webhook-secret_123"
PATH = "/telegram/webhook"
CODE = re.compile(r"this code: ([A-Z0-9]{4}-[A-Z0-9]{4})")


def webhook_profile(fake: FakeTelegram) -> str:
    """Telegram by webhook: served by every ingress (polling would run in one only)."""
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
    allow: [{OWNER}]
    pairing: true
"""


async def post_update(ingress: DaemonProcess, update_id: int, text: str) -> None:
    body: dict[str, Any] = {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": int(time.time()),
            "chat": {"id": STRANGER, "type": "private", "first_name": "Mallory"},
            "from": {"id": STRANGER, "is_bot": False, "first_name": "M", "username": "mallory"},
            "text": text,
        },
    }
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    async with (
        aiohttp.ClientSession() as http,
        http.post(ingress.http_url + PATH, json=body, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()


def texts(fake: FakeTelegram) -> list[str]:
    return [str(message["text"]) for message in fake.bot_messages(STRANGER)]


async def test_an_approval_reaches_every_ingress(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    async with FakeTelegram() as fake, processes() as running:
        config = cluster_config(
            tmp_path, {profile: webhook_profile(fake)}, prefix=nats_prefix, dsn=postgres_dsn
        )
        running.append(await start_role(config, "worker"))
        first = await start_role(config, "ingress")
        second = await start_role(config, "ingress")
        running.extend([first, second])

        await post_update(first, 1, "let me in")
        await fake.wait_until(lambda: len(texts(fake)) == 1, timeout_s=30)
        found = CODE.search(texts(fake)[0])
        assert found, texts(fake)

        reloads = {
            ingress: count_logged(ingress, "allow.overlay_reloaded") for ingress in (first, second)
        }
        paired = await run_cli("pair", found.group(1), "-c", str(config), cwd=tmp_path)
        assert paired.code == 0, paired.err
        assert f"telegram sender {STRANGER} may now talk to profile {profile}" in paired.out
        for ingress, seen in reloads.items():
            await wait_logged(ingress, "allow.overlay_reloaded", more_than=seen)

        # Allowed by the ingress that did not issue the code, and by the one that did.
        await post_update(second, 2, "hello via the second")
        await fake.wait_until(lambda: len(texts(fake)) == 2, timeout_s=30)
        await post_update(first, 3, "hello via the first")
        await fake.wait_until(lambda: len(texts(fake)) == 3, timeout_s=30)
        assert texts(fake)[1:] == ["hello via the second", "hello via the first"]
