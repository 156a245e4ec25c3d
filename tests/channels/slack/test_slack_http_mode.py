"""HTTP mode: events posted to the webhook route, verified by Bolt's v0 signature check."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.channels.slack.conftest import ALICE, DM, GENERAL, RunningSlack, run_slack
from tests.fakes import LocalHttpServer
from tests.fakes.slack_server import FakeSlack, sign_request

PATH = "/hooks/slack"


@dataclass
class Webhook:
    slack: RunningSlack
    url: str
    session: aiohttp.ClientSession

    async def post(
        self, body: dict[str, Any], headers: dict[str, str] | None = None, **sign: Any
    ) -> tuple[int, str]:
        raw = json.dumps(body).encode()
        signed = sign_request(self.slack.fake.signing_secret, raw, **sign)
        headers = {**signed, **(headers or {})}
        async with self.session.post(self.url, data=raw, headers=headers) as response:
            return response.status, await response.text()


@pytest.fixture
async def webhook(fake_slack: FakeSlack, tmp_path: Path) -> AsyncIterator[Webhook]:
    async with run_slack(fake_slack, tmp_path, mode="http", webhook_path=PATH) as running:
        app = web.Application()
        app.add_routes(running.channel.web_routes())
        async with LocalHttpServer(app) as server, aiohttp.ClientSession() as session:
            yield Webhook(running, f"{server.origin}{PATH}", session)


async def test_http_mode_opens_no_socket(webhook: Webhook) -> None:
    fake = webhook.slack.fake
    assert [r.method for r in fake.requests] == ["auth.test"]
    assert fake.open_connections == 0


async def test_a_correctly_signed_event_is_accepted_and_published(webhook: Webhook) -> None:
    fake = webhook.slack.fake
    body = fake.event_callback(fake.user_message(DM, ALICE, "over http", channel_type="im"))

    status, _ = await webhook.post(body)

    assert status == 200
    inbound = await webhook.slack.next_inbound()
    assert (inbound.sender_id, inbound.content) == (ALICE, "over http")


async def test_a_retry_with_the_same_event_id_is_published_once(webhook: Webhook) -> None:
    fake = webhook.slack.fake
    body = fake.event_callback(fake.user_message(GENERAL, ALICE, "retried"))
    retry = {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}

    fresh = fake.event_callback(fake.user_message(GENERAL, ALICE, "new"))
    assert (await webhook.post(body))[0] == 200
    assert (await webhook.post(body, retry))[0] == 200
    assert (await webhook.post(fresh))[0] == 200

    assert (await webhook.slack.next_inbound()).content == "retried"
    assert (await webhook.slack.next_inbound()).content == "new"


@pytest.mark.parametrize(
    ("headers", "sign"),
    [
        ({"X-Slack-Signature": "v0=" + "0" * 64}, {}),
        ({}, {"timestamp": int(time.time()) - 6 * 60}),
        ({"X-Slack-Request-Timestamp": "not-a-number"}, {}),
    ],
    ids=["forged signature", "stale timestamp", "garbled timestamp"],
)
async def test_an_unverifiable_request_is_refused_and_nothing_published(
    webhook: Webhook, headers: dict[str, str], sign: dict[str, Any]
) -> None:
    fake = webhook.slack.fake
    forged = fake.event_callback(fake.user_message(DM, ALICE, "forged", channel_type="im"))

    status, _ = await webhook.post(forged, headers, **sign)

    assert status == 401
    body = fake.event_callback(fake.user_message(DM, ALICE, "genuine", channel_type="im"))
    assert (await webhook.post(body))[0] == 200
    assert (await webhook.slack.next_inbound()).content == "genuine"


async def test_a_request_signed_with_another_secret_is_refused(webhook: Webhook) -> None:
    fake = webhook.slack.fake
    raw = json.dumps(fake.event_callback(fake.user_message(DM, ALICE, "x"))).encode()
    headers = sign_request("someone-elses-secret", raw)

    async with webhook.session.post(webhook.url, data=raw, headers=headers) as response:
        assert response.status == 401
    assert webhook.slack.agent.inbound_depth() == 0


async def test_the_url_verification_challenge_is_answered(webhook: Webhook) -> None:
    challenge = {"token": "t", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}

    status, text = await webhook.post({**challenge, "type": "url_verification"})

    assert status == 200
    assert json.loads(text) == {"challenge": challenge["challenge"]}


async def test_a_stopped_channel_answers_503(webhook: Webhook) -> None:
    await webhook.slack.channel.stop()
    fake = webhook.slack.fake

    status, _ = await webhook.post(fake.event_callback(fake.user_message(DM, ALICE, "late")))

    assert status == 503


async def test_malformed_signed_bodies_are_skipped(webhook: Webhook) -> None:
    fake = webhook.slack.fake
    for raw in (b"this is not json", b'{"type": "event_callback", "event": "nonsense"}'):
        async with webhook.session.post(webhook.url, data=raw, headers=fake.sign(raw)) as response:
            assert response.status < 500
    no_user = fake.user_message(DM, ALICE, "who?", channel_type="im")
    del no_user["user"]
    assert (await webhook.post(fake.event_callback(no_user)))[0] == 200

    body = fake.event_callback(fake.user_message(DM, ALICE, "fine", channel_type="im"))
    assert (await webhook.post(body))[0] == 200
    assert (await webhook.slack.next_inbound()).content == "fine"
