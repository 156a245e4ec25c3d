"""Buttons on QQ (`keyboard: true`), through the daemon subprocess and the fake QQ's webhooks.

The webhook agent's reply with two buttons and a link arrives as a Markdown message with a
keyboard; a tap (INTERACTION_CREATE) reaches the agent as `message.callback` once, also when QQ
delivers it twice, is acknowledged (`PUT /interactions/{id}`) before the agent's answer however
slow, and that answer names the tap's event; a second tap on the same message reaches no agent
and is told "already answered".
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.e2e.conftest import WAIT_S, logged, running_daemon
from tests.fakes.qq_server import FakeQQ, Reply
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply

pytestmark = pytest.mark.slow

ALICE = "alice-openid"
CHAT = f"c2c:{ALICE}"
PATH = "/qq/callback"
BUTTONS = [
    [{"text": "Approve", "data": "refund:42:yes"}, {"text": "Deny", "data": "refund:42:no"}],
    [{"text": "Policy", "url": "https://example.com/refunds"}],
]


def profile(fake: FakeQQ, webhook: FakeWebhook) -> str:
    return f"""\
agent: {{type: webhook, url: "{webhook.url}", timeout_s: 30}}
queue_mode: followup
channels:
  - type: qq-bot
    app_id: "{fake.app_id}"
    app_secret: "{fake.app_secret}"
    api_base_url: {fake.api_base_url}
    token_url: {fake.token_url}
    webhook_path: {PATH}
    keyboard: true
    allow: [{ALICE}]
"""


def answered(fake: FakeQQ, event_id: str) -> list[Reply]:
    return [r for r in fake.replies if r.msg_id == event_id and r.status == 200]


async def test_a_reply_shows_a_keyboard_and_a_tap_reaches_the_agent_once(tmp_path: Path) -> None:
    async with (
        FakeQQ() as fake,
        FakeWebhook() as webhook,
        running_daemon(tmp_path, {"qq": profile(fake, webhook)}) as daemon,
    ):
        await daemon.wait_log(logged("qq.webhook_ready"))
        url = daemon.http_url + PATH
        webhook.script(ScriptedReply(text="Approve the refund?", buttons=BUTTONS))
        assert (await fake.deliver(url, fake.c2c_message(ALICE, "refund please")))[0] == 200
        await fake.wait_until(lambda: fake.keyboards_to(CHAT), WAIT_S)
        [shown] = fake.keyboards_to(CHAT)
        assert (shown.msg_type, shown.content) == (2, "Approve the refund?")
        approve, deny, policy = shown.buttons()
        assert [b["render_data"]["label"] for b in (approve, deny, policy)] == [
            "Approve",
            "Deny",
            "Policy",
        ]
        assert [b["action"]["type"] for b in (approve, deny, policy)] == [1, 1, 0]
        assert policy["action"]["data"] == "https://example.com/refunds"

        # A slow agent: it answers only once the test has seen the tap acknowledged.
        webhook.script(ScriptedReply(text="Denied.", held=True))
        tap = fake.tap(shown, "Deny", ALICE)
        interaction = tap["d"]["id"]
        first, again = await asyncio.gather(fake.deliver(url, tap), fake.deliver(url, tap))
        assert {first[0], again[0]} == {200}
        await fake.wait_until(lambda: interaction in fake.interaction_acks, WAIT_S)
        await webhook.control.holding.wait()
        assert answered(fake, tap["id"]) == []
        webhook.control.release.set()
        await fake.wait_until(lambda: answered(fake, tap["id"]), WAIT_S)
        [reply] = answered(fake, tap["id"])
        assert reply.content == "Denied."
        held_id = json.loads(deny["action"]["data"])["m"]
        assert webhook.taps() == [{"data": "refund:42:no", "message_id": held_id}]
        assert webhook.requests[-1].json["message"]["content"] == "Deny"

        # A second tap on the same message reaches no agent: it is told, and acknowledged.
        asked = len(webhook.requests)
        late = fake.tap(shown, "Approve", ALICE)
        assert (await fake.deliver(url, late))[0] == 200
        assert fake.interaction_acks[late["d"]["id"]] == [0]
        await fake.wait_until(lambda: answered(fake, late["id"]), WAIT_S)
        [notice] = answered(fake, late["id"])
        assert "Already answered" in notice.content
        assert len(webhook.requests) == asked
        assert fake.violations == []
