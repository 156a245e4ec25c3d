"""Webhook mode under a full backlog: 429/503 with Retry-After, and the retry is taken."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bus import InboundMessage, InboundRefused
from tests.channels.telegram.conftest import ChannelFactory
from tests.fakes.telegram_server import FakeTelegram

SECRET = "s3cr3t_token-for-tests"
PATH = "/hooks/telegram"
HEADERS = {"X-Telegram-Bot-Api-Secret-Token": SECRET}


@dataclass
class RefusingOnce:
    """An inbound sender whose backlog is full for the first message, then takes them."""

    refusal: InboundRefused
    taken: list[InboundMessage] = field(default_factory=list)
    refused: int = 0

    async def send(self, message: InboundMessage) -> None:
        if self.refused == 0:
            self.refused += 1
            raise self.refusal
        self.taken.append(message)

    def close(self) -> None:
        pass


def update(update_id: int) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": int(time.time()),
            "chat": {"id": 42, "type": "private", "first_name": "Alice"},
            "from": {"id": 42, "is_bot": False, "first_name": "Alice"},
            "text": "hello",
        },
    }


@pytest.mark.parametrize(
    ("refusal", "status"),
    [
        (InboundRefused("chat", 1.5, "this chat's backlog is full"), 429),
        (InboundRefused("global", 4.0, "the backlog is full"), 503),
    ],
)
async def test_a_full_backlog_is_refused_with_retry_after_and_the_retry_is_taken(
    fake: FakeTelegram, make_channel: ChannelFactory, refusal: InboundRefused, status: int
) -> None:
    channel = make_channel(
        mode="webhook",
        webhook_url="https://bot.example.com/hooks/telegram",
        webhook_path=PATH,
        secret_token=SECRET,
    )
    inbound = RefusingOnce(refusal)
    app = web.Application()
    app.add_routes(channel.web_routes())
    task = asyncio.create_task(channel.start(inbound), name="test:telegram-webhook")
    try:
        await fake.wait_for_calls("setWebhook")
        async with TestClient(TestServer(app)) as client:
            refused = await client.post(PATH, json=update(11), headers=HEADERS)
            assert refused.status == status
            assert refusal.retry_after_s is not None
            assert refused.headers["Retry-After"] == str(int(refusal.retry_after_s + 0.999))
            assert inbound.taken == []
            retried = await client.post(PATH, json=update(11), headers=HEADERS)
            assert retried.status == 200
        assert [message.content for message in inbound.taken] == ["hello"]
    finally:
        await channel.stop()
        await asyncio.wait_for(task, 10)
