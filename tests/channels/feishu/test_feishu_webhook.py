"""Webhook mode: encrypted, signed events posted to the channel's route."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web

from bus import CALLBACK, REACTION
from config import FeishuConfig
from tests.channels.feishu.conftest import (
    ALICE,
    DM,
    RunningFeishu,
    run_feishu,
    sent_before_a_restart,
)
from tests.fakes import LocalHttpServer
from tests.fakes.feishu_server import FakeFeishu

PATH = "/hooks/feishu"


@dataclass
class Hook:
    running: RunningFeishu
    url: str

    @property
    def fake(self) -> FakeFeishu:
        return self.running.fake


@asynccontextmanager
async def serving_webhook(
    fake: FakeFeishu, *, inbound_reactions: bool = False
) -> AsyncIterator[Hook]:
    """The channel in webhook mode, its route served over HTTP, once it takes events."""
    async with run_feishu(
        fake,
        inbound_reactions=inbound_reactions,
        mode="webhook",
        webhook_path=PATH,
        encrypt_key=fake.encrypt_key,
        verification_token=fake.verification_token,
    ) as running:
        app = web.Application()
        app.add_routes(running.channel.web_routes())
        async with LocalHttpServer(app) as server:
            await asyncio.wait_for(running.channel.wait_receiving(), 5)
            yield Hook(running, server.origin + PATH)


@pytest.fixture
async def hook(fake: FakeFeishu) -> AsyncIterator[Hook]:
    async with serving_webhook(fake) as served:
        yield served


def test_webhook_mode_requires_both_secrets() -> None:
    with pytest.raises(ValueError, match="encrypt_key"):
        FeishuConfig(app_id="cli_x", app_secret="s", mode="webhook", verification_token="t")
    with pytest.raises(ValueError, match="verification_token"):
        FeishuConfig(app_id="cli_x", app_secret="s", mode="webhook", encrypt_key="k")


async def test_the_url_check_is_answered_only_with_our_token(hook: Hook) -> None:
    fake = hook.fake
    headers, body = fake.sealed(fake.url_verification(), signed=False)
    status, text = await fake.post(hook.url, headers, body)
    assert (status, text) == (200, '{"challenge": "ajls384kdjx98XX"}')
    headers, body = fake.sealed(fake.url_verification(token="not-ours"), signed=False)
    assert (await fake.post(hook.url, headers, body))[0] == 401


async def test_a_signed_event_is_answered_once_durable_and_a_retry_once(hook: Hook) -> None:
    fake, inbound = hook.fake, hook.running.inbound
    event = fake.message_event(ALICE, DM, "over the webhook")
    inbound.hold()
    posting = asyncio.create_task(fake.post_event(hook.url, event), name="post")
    await asyncio.wait_for(inbound.holding.wait(), 5)
    assert not posting.done()
    inbound.release.set()
    assert (await asyncio.wait_for(posting, 5))[0] == 200
    assert (await fake.post_event(hook.url, event))[0] == 200  # Feishu's retry
    assert [m.content for m in inbound.messages] == ["over the webhook"]
    assert inbound.messages[0].message_id == event["header"]["event_id"]


async def test_a_full_backlog_is_answered_with_retry_after(hook: Hook) -> None:
    fake, inbound = hook.fake, hook.running.inbound
    inbound.refuse_next()
    event = fake.message_event(ALICE, DM, "later")
    headers, body = fake.sealed(event)
    status, _ = await fake.post(hook.url, headers, body)
    assert status == 503
    assert (await fake.post_event(hook.url, event))[0] == 200
    assert [m.content for m in inbound.messages] == ["later"]


async def test_forged_stale_unsigned_and_foreign_events_are_refused(hook: Hook) -> None:
    fake = hook.fake
    forgeries = fake.forgeries(fake.message_event(ALICE, DM, "let me in"))
    statuses = {
        name: (await fake.post(hook.url, *request))[0] for name, request in forgeries.items()
    }
    assert statuses == dict.fromkeys(forgeries, 401)
    assert not hook.running.inbound.messages


async def test_a_card_button_tap_posted_to_the_route_is_a_tap(hook: Hook) -> None:
    fake = hook.fake
    value = {"data": "refund:42:yes", "text": "Approve"}
    status, _ = await fake.post_event(hook.url, fake.card_action_event(ALICE, DM, "om_held", value))
    assert status == 200
    [tapped] = hook.running.inbound.messages
    assert tapped.content == "Approve"
    assert tapped.metadata[CALLBACK] == {"data": "refund:42:yes", "message_id": "om_held"}


async def test_a_reaction_whose_message_cannot_be_looked_up_yet_is_answered_503(
    fake: FakeFeishu,
) -> None:
    async with serving_webhook(fake, inbound_reactions=True) as served:
        running, url = served.running, served.url
        # A card the bot sent before a restart: the channel must ask Feishu about it.
        held = await sent_before_a_restart(fake, DM, "Sent before the restart.")
        thumbs = fake.reaction_event(ALICE, held, "THUMBSUP")
        fake.rate_limit_next("get")
        headers, body = fake.sealed(thumbs)
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, data=body, headers=headers) as refused,
        ):
            assert refused.status == 503
            assert refused.headers["Retry-After"] == "1"
        assert running.inbound.messages == []
        assert (await fake.post_event(url, thumbs))[0] == 200  # Feishu's retry
        [reaction] = running.inbound.messages
        assert (reaction.chat_id, reaction.metadata[REACTION]) == (
            DM,
            {"emoji": "👍", "message_id": held},
        )
