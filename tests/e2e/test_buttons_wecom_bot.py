"""Buttons on the WeCom AI bot, through the daemon subprocess and the fake WeCom websocket.

The webhook agent's reply with two buttons arrives as its text, ending the stream that answered
the user's message, and a `button_interaction` template card after it; a tap
(`template_card_event`) reaches the agent as `message.callback` once, also when WeCom delivers
the event twice; the card is replaced by one showing the choice within the event's five
seconds, while the agent is still answering; a second tap on the card reaches no agent, and the
chat is told its buttons were used. After a restart a tap on a card sent before it is
understood, and its card replaced, from the card's keys alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S
from tests.fakes.webhook_server import APPROVE_OR_DENY, FakeWebhook, ScriptedReply
from tests.fakes.wecom_bot_server import CardSent, FakeWecomBot
from tests.support.daemon import DaemonProcess, write_config

pytestmark = pytest.mark.slow

ALICE = "alice"


def profile(fake: FakeWecomBot, webhook: FakeWebhook) -> str:
    return f"""\
agent: {{type: webhook, url: "{webhook.url}", timeout_s: 30}}
queue_mode: followup
channels:
  - type: wecom-bot
    bot_id: "{fake.bot_id}"
    secret: "{fake.secret}"
    ws_url: {fake.ws_url}
    allow: [{ALICE}]
"""


async def asked_with_buttons(fake: FakeWecomBot, webhook: FakeWebhook) -> tuple[str, CardSent]:
    """Alice asks; the agent answers with two buttons: her message's req_id, and the card."""
    webhook.script(ScriptedReply(text="Approve the refund?", buttons=APPROVE_OR_DENY))
    req_id, _ = await fake.push_text(ALICE, "refund please")
    await fake.wait_until(lambda: fake.cards_to(ALICE), WAIT_S)
    [sent] = fake.cards_to(ALICE)
    return req_id, sent


async def test_buttons_are_a_card_and_a_tap_reaches_the_agent_once(tmp_path: Path) -> None:
    async with FakeWecomBot() as fake, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"wb": profile(fake, webhook)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            await fake.wait_subscribed(timeout_s=WAIT_S)
            req_id, sent = await asked_with_buttons(fake, webhook)
            # The reply was shown growing in a stream answering her message: the stream ends
            # with its text, and the card follows it.
            assert fake.finished_text(req_id) == "Approve the refund?"
            assert (sent.req_id, sent.chat_id) == (None, ALICE)
            assert sent.card["card_type"] == "button_interaction"
            assert sent.card["main_title"] == {"title": "Approve the refund?"}
            approve, deny = sent.card["button_list"]
            assert (approve["text"], deny["text"]) == ("Approve", "Deny")

            # A slow agent: it answers only once the test has seen the card replaced.
            webhook.script(ScriptedReply(text="Denied.", held=True))
            event_req, event_id = await fake.push_card_event(ALICE, sent.task_id, deny["key"])
            # WeCom delivers the event again (same msgid, a new req_id): the same tap.
            await fake.push_card_event(ALICE, sent.task_id, deny["key"], msg_id=event_id)
            await webhook.control.holding.wait()
            await fake.wait_until(lambda: fake.card_updates, WAIT_S)
            [update] = fake.card_updates
            assert (update.req_id, update.task_id) == (event_req, sent.task_id)
            shown = fake.cards[sent.task_id]
            assert shown["main_title"] == {"title": "Approve the refund?", "desc": "✓ Deny"}
            assert [b["key"] for b in shown["button_list"]] == [deny["key"]]
            assert "Denied." not in fake.markdown_to(ALICE)

            webhook.control.release.set()
            await fake.wait_until(lambda: "Denied." in fake.markdown_to(ALICE), WAIT_S)
            assert webhook.taps() == [{"data": "refund:42:no", "message_id": sent.task_id}]
            assert webhook.requests[-1].json["message"]["content"] == "Deny"

            # A second tap, from a client still showing the whole card, reaches no agent.
            asked = len(webhook.requests)
            await fake.push_card_event(ALICE, sent.task_id, approve["key"])
            await fake.wait_until(
                lambda: any("Already answered" in text for text in fake.markdown_to(ALICE)),
                WAIT_S,
            )
            assert len(webhook.requests) == asked
            assert webhook.taps() == [{"data": "refund:42:no", "message_id": sent.task_id}]
            assert fake.markdown_to(ALICE).count("Denied.") == 1
            # The card still shows the first choice.
            await fake.wait_until(lambda: len(fake.card_updates) == 2, WAIT_S)
            assert fake.cards[sent.task_id]["main_title"]["desc"] == "✓ Deny"
            assert fake.violations == []
        finally:
            await daemon.stop()


async def test_a_tap_after_a_restart_is_understood_from_the_cards_keys(tmp_path: Path) -> None:
    async with FakeWecomBot() as fake, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"wb": profile(fake, webhook)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            await fake.wait_subscribed(timeout_s=WAIT_S)
            _req_id, sent = await asked_with_buttons(fake, webhook)
            assert await daemon.stop_cleanly() == 0
            daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
            await fake.wait_subscribed(count=2, timeout_s=WAIT_S)

            webhook.script(ScriptedReply(text="Approved."))
            approve = sent.card["button_list"][0]
            await fake.push_card_event(ALICE, sent.task_id, approve["key"])
            await fake.wait_until(lambda: "Approved." in fake.markdown_to(ALICE), WAIT_S)
            assert webhook.taps() == [{"data": "refund:42:yes", "message_id": sent.task_id}]
            assert webhook.requests[-1].json["message"]["content"] == "Approve"
            await fake.wait_until(lambda: fake.card_updates, WAIT_S)
            shown = fake.cards[sent.task_id]
            assert shown["main_title"] == {"title": "Approve the refund?", "desc": "✓ Approve"}
            assert fake.violations == []
        finally:
            await daemon.stop()
