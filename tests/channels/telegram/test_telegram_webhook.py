"""Webhook mode: Telegram POSTs updates to the route the channel gives the daemon's server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from channels.telegram import TelegramChannel
from tests.channels.telegram.conftest import ChannelFactory, running
from tests.fakes.telegram_server import FakeTelegram

SECRET = "s3cr3t_token-for-tests"
PATH = "/hooks/telegram"


@pytest.fixture
def webhook_channel(make_channel: ChannelFactory) -> TelegramChannel:
    return make_channel(
        mode="webhook",
        webhook_url="https://bot.example.com/hooks/telegram",
        webhook_path=PATH,
        secret_token=SECRET,
    )


@pytest.fixture
async def client(webhook_channel: TelegramChannel) -> AsyncIterator[TestClient[Any, Any]]:
    app = web.Application()
    app.add_routes(webhook_channel.web_routes())
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


def message_update(update_id: int, text: str) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": 1_700_000_000,
            "chat": {"id": 42, "type": "private", "first_name": "Alice"},
            "from": {"id": 42, "is_bot": False, "first_name": "Alice", "username": "alice"},
            "text": text,
        },
    }


async def test_polling_mode_has_no_routes(make_channel: ChannelFactory) -> None:
    assert make_channel().web_routes() == ()


async def test_start_sets_the_webhook_and_stop_deletes_it(
    fake: FakeTelegram, webhook_channel: TelegramChannel
) -> None:
    async with running(webhook_channel, fake):
        assert fake.state.webhook == {
            "url": "https://bot.example.com/hooks/telegram",
            "secret_token": SECRET,
            "allowed_updates": ["message", "edited_message", "callback_query"],
        }
        assert fake.calls("getUpdates") == []
    assert fake.state.webhook is None
    assert fake.calls("deleteWebhook")


async def test_an_update_with_the_right_secret_is_published_once(
    fake: FakeTelegram, webhook_channel: TelegramChannel, client: TestClient[Any, Any]
) -> None:
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    async with running(webhook_channel, fake) as run:
        response = await client.post(PATH, json=message_update(5, "via webhook"), headers=headers)
        assert response.status == 200
        inbound = await run.next_inbound()
        # Telegram re-sends when it missed our answer; the repeat is acknowledged, not handled.
        again = await client.post(PATH, json=message_update(5, "via webhook"), headers=headers)
        assert again.status == 200
        assert run.queued_inbound() == 0
    assert inbound.content == "via webhook"
    assert inbound.message_id == "42:5"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"X-Telegram-Bot-Api-Secret-Token": "wrong"}, 403),
        ({"X-Telegram-Bot-Api-Secret-Token": SECRET + "x"}, 403),
    ],
)
async def test_a_missing_or_wrong_secret_is_refused_and_nothing_published(
    fake: FakeTelegram,
    webhook_channel: TelegramChannel,
    client: TestClient[Any, Any],
    headers: dict[str, str],
    status: int,
) -> None:
    async with running(webhook_channel, fake) as run:
        response = await client.post(PATH, json=message_update(6, "forged"), headers=headers)
        assert response.status == status
        assert run.queued_inbound() == 0


async def test_malformed_bodies_are_answered_without_stopping_the_channel(
    fake: FakeTelegram, webhook_channel: TelegramChannel, client: TestClient[Any, Any]
) -> None:
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    async with running(webhook_channel, fake) as run:
        not_json = await client.post(PATH, data=b"{garbage", headers=headers)
        assert not_json.status == 400
        garbage = await client.post(PATH, json={"update_id": 7, "message": "x"}, headers=headers)
        assert garbage.status == 200
        good = await client.post(PATH, json=message_update(8, "fine"), headers=headers)
        assert good.status == 200
        inbound = await run.next_inbound()
        assert run.queued_inbound() == 0
        assert not run.task.done()
    assert inbound.content == "fine"


async def test_updates_before_start_are_refused_for_a_later_retry(
    webhook_channel: TelegramChannel, client: TestClient[Any, Any]
) -> None:
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    response = await client.post(PATH, json=message_update(9, "early"), headers=headers)
    assert response.status == 503
    await webhook_channel.stop()
