"""Buttons and reactions on Feishu, through the daemon subprocess and the fake Feishu.

The webhook agent's reply with two buttons arrives as a card whose `action` element holds two
buttons (each value `{"data", "text"}`); a tap (a `card.action.trigger` callback, posted to the
daemon's webhook route or sent as a card frame over the long connection) reaches the agent as
`message.callback` once, also when Feishu delivers it twice; the callback is answered before
the reply of an agent however slow (Feishu wants it within 3 s); the card is updated without
its buttons, and a second tap reaches no agent. A user's reaction to the bot's card
(`im.message.reaction.created_v1`) reaches the agent once with `inbound_reactions`, quoting
the card's text, and no agent without.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged
from tests.fakes.feishu_server import FakeFeishu, FeishuMessage
from tests.fakes.webhook_server import APPROVE_OR_DENY, FakeWebhook, ScriptedReply
from tests.support.daemon import DaemonProcess, write_config

pytestmark = pytest.mark.slow

ALICE = "ou_alice0000000000000001"
WEBHOOK_PATH = "/feishu/events"


def profile(fake: FakeFeishu, webhook: FakeWebhook, *, mode: str, extra: str = "") -> str:
    receiving = (
        f"""\
    mode: webhook
    encrypt_key: "{fake.encrypt_key}"
    verification_token: {fake.verification_token}
    webhook_path: {WEBHOOK_PATH}
"""
        if mode == "webhook"
        else ""
    )
    return f"""\
agent: {{type: webhook, url: "{webhook.url}", timeout_s: 30}}
queue_mode: followup
{extra}channels:
  - type: feishu
    app_id: {fake.app_id}
    app_secret: {fake.app_secret}
    base_url: {fake.base_url}
{receiving}    allow: [{ALICE}]
"""


def said(fake: FakeFeishu, chat: str, text: str) -> bool:
    return text in fake.texts(chat)


async def started(config: Path, fake: FakeFeishu, *, mode: str) -> DaemonProcess:
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    if mode == "webhook":
        await daemon.wait_log(logged("feishu.receiving"))
    else:
        await fake.wait_connected(timeout_s=WAIT_S)
    return daemon


async def asked_with_buttons(
    fake: FakeFeishu, webhook: FakeWebhook, chat: str, url: str
) -> FeishuMessage:
    """The user asks over the webhook; the agent answers with two buttons: the card."""
    webhook.script(ScriptedReply(text="Approve the refund?", buttons=APPROVE_OR_DENY))
    status, _ = await fake.post_event(url, fake.message_event(ALICE, chat, "refund please"))
    assert status == 200
    await fake.wait_until(lambda: any(m.buttons for m in fake.chat_messages(chat)), WAIT_S)
    [held] = [m for m in fake.chat_messages(chat) if m.buttons]
    return held


async def test_buttons_render_and_a_webhook_tap_reaches_the_agent_once(tmp_path: Path) -> None:
    chat = "oc_buttons000000000000001"
    async with FakeFeishu() as fake, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"fs": profile(fake, webhook, mode="webhook")})
        daemon = await started(config, fake, mode="webhook")
        url = daemon.http_url + WEBHOOK_PATH
        try:
            held = await asked_with_buttons(fake, webhook, chat, url)
            assert held.msg_type == "interactive"
            assert held.content["elements"] == [
                {"tag": "markdown", "content": "Approve the refund?"},
                {
                    "tag": "action",
                    "actions": [
                        {
                            "tag": "button",
                            "text": {"tag": "plain_text", "content": "Approve"},
                            "type": "default",
                            "value": {"data": "refund:42:yes", "text": "Approve"},
                        },
                        {
                            "tag": "button",
                            "text": {"tag": "plain_text", "content": "Deny"},
                            "type": "default",
                            "value": {"data": "refund:42:no", "text": "Deny"},
                        },
                    ],
                },
            ]
            [[approve, deny]] = held.buttons

            # A slow agent: it answers only once the test has seen the callback answered.
            webhook.script(ScriptedReply(text="Denied.", held=True))
            tap = fake.card_action_event(ALICE, chat, held.message_id, deny["value"])
            assert await fake.post_event(url, tap) == (200, "{}")
            # Feishu delivers the same callback again (signed anew): one tap.
            assert await fake.post_event(url, tap) == (200, "{}")
            await webhook.control.holding.wait()
            assert not said(fake, chat, "Denied.")
            webhook.control.release.set()
            await fake.wait_until(lambda: said(fake, chat, "Denied."), WAIT_S)
            assert webhook.taps() == [{"data": "refund:42:no", "message_id": held.message_id}]
            assert webhook.requests[-1].json["message"]["content"] == "Deny"
            # Single use: the card is updated without its buttons; its text stays.
            await fake.wait_until(lambda: not held.buttons, WAIT_S)
            assert held.updates
            assert [e["tag"] for e in held.content["elements"]] == ["markdown"]
            assert held.text == "Approve the refund?"

            # A second tap (from a client still showing the buttons) reaches no agent.
            asked = len(webhook.requests)
            late = fake.card_action_event(ALICE, chat, held.message_id, approve["value"])
            assert (await fake.post_event(url, late))[0] == 200
            await fake.wait_until(
                lambda: any("Already answered" in text for text in fake.texts(chat)), WAIT_S
            )
            assert len(webhook.requests) == asked
            assert webhook.taps() == [{"data": "refund:42:no", "message_id": held.message_id}]
        finally:
            await daemon.stop()


async def test_a_tap_over_the_long_connection_is_acknowledged_before_a_slow_agent_answers(
    tmp_path: Path,
) -> None:
    chat = "oc_buttons000000000000002"
    async with FakeFeishu() as fake, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"fs": profile(fake, webhook, mode="ws")})
        daemon = await started(config, fake, mode="ws")
        try:
            webhook.script(ScriptedReply(text="Approve the refund?", buttons=APPROVE_OR_DENY))
            asked = await fake.push_event(fake.message_event(ALICE, chat, "refund please"))
            await fake.wait_until(lambda: fake.acked(asked), WAIT_S)
            await fake.wait_until(lambda: any(m.buttons for m in fake.chat_messages(chat)), WAIT_S)
            [held] = [m for m in fake.chat_messages(chat) if m.buttons]
            [[approve, _deny]] = held.buttons

            webhook.script(ScriptedReply(text="Approved.", held=True))
            tap = fake.card_action_event(ALICE, chat, held.message_id, approve["value"])
            first = await fake.push_event(tap, kind="card")
            again = await fake.push_event(tap, kind="card")  # Feishu delivers it twice
            await fake.wait_until(lambda: fake.acked(first) and fake.acked(again), WAIT_S)
            await webhook.control.holding.wait()
            assert not said(fake, chat, "Approved.")
            webhook.control.release.set()
            await fake.wait_until(lambda: said(fake, chat, "Approved."), WAIT_S)
            assert webhook.taps() == [{"data": "refund:42:yes", "message_id": held.message_id}]
            await fake.wait_until(lambda: not held.buttons, WAIT_S)
            assert held.text == "Approve the refund?"
            assert fake.texts(chat).count("Approved.") == 1
        finally:
            await daemon.stop()


async def answered(
    fake: FakeFeishu, webhook: FakeWebhook, chat: str, text: str, reply: str
) -> None:
    """The user says `text` over the long connection and the agent's `reply` is shown."""
    webhook.script(ScriptedReply(text=reply))
    frame = await fake.push_event(fake.message_event(ALICE, chat, text))
    await fake.wait_until(lambda: fake.acked(frame) and said(fake, chat, reply), WAIT_S)


async def test_a_users_reaction_reaches_the_agent_once_with_inbound_reactions(
    tmp_path: Path,
) -> None:
    chat = "oc_reaction00000000000001"
    async with FakeFeishu() as fake, FakeWebhook() as webhook:
        extra = "inbound_reactions: true\n"
        config = write_config(tmp_path, {"fs": profile(fake, webhook, mode="ws", extra=extra)})
        daemon = await started(config, fake, mode="ws")
        try:
            await answered(fake, webhook, chat, "refund please", "The refund is done.")
            [card] = fake.chat_messages(chat)

            webhook.script(ScriptedReply(text="Glad it helped."))
            thumbs = fake.reaction_event(ALICE, card.message_id, "THUMBSUP")
            first = await fake.push_event(thumbs)
            again = await fake.push_event(thumbs)  # Feishu delivers the same event twice
            await fake.wait_until(lambda: fake.acked(first) and fake.acked(again), WAIT_S)
            await fake.wait_until(lambda: said(fake, chat, "Glad it helped."), WAIT_S)
            # A turn after both: a second turn for the reaction would have come before it.
            await answered(fake, webhook, chat, "that is all", "Bye.")

            assert webhook.reactions() == [
                (
                    "[reaction 👍 to: The refund is done.]",
                    {"emoji": "👍", "message_id": card.message_id},
                )
            ]
            assert [post.json["message"]["content"] for post in webhook.requests] == [
                "refund please",
                "[reaction 👍 to: The refund is done.]",
                "that is all",
            ]
            # The bot's own card: its chat was known, nothing was looked up.
            assert not [c for c in fake.calls if c.method == "GET" and "/im/v1/messages/" in c.path]
        finally:
            await daemon.stop()


async def test_a_users_reaction_reaches_no_agent_by_default(tmp_path: Path) -> None:
    chat = "oc_reaction00000000000002"
    async with FakeFeishu() as fake, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"fs": profile(fake, webhook, mode="ws")})
        daemon = await started(config, fake, mode="ws")
        try:
            await answered(fake, webhook, chat, "hi", "Hello.")
            [card] = fake.chat_messages(chat)
            thumbs = await fake.push_event(fake.reaction_event(ALICE, card.message_id, "THUMBSUP"))
            await fake.wait_until(lambda: fake.acked(thumbs), WAIT_S)
            await answered(fake, webhook, chat, "still there?", "Still here.")

            assert webhook.reactions() == []
            assert [post.json["message"]["content"] for post in webhook.requests] == [
                "hi",
                "still there?",
            ]
        finally:
            await daemon.stop()
