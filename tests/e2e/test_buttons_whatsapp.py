"""Buttons on WhatsApp, through the daemon subprocess and the fake Cloud API.

The webhook agent's reply with two buttons arrives as an interactive `button` message, with more
than three as an interactive `list`; a tap (an `interactive` reply whose `context.id` names the
bot message) reaches the agent as `message.callback` once, also when Meta delivers the webhook
twice, and across a SIGKILL right after its 200; the 200 comes once the tap is durable, while
the agent is still answering; a second tap on the same message's buttons reaches no agent, and
the chat is told they were used. A user's reaction to a bot message reaches the agent once with
`inbound_reactions`, quoting the message's text, and no agent without; one taken back, none.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged
from tests.fakes.webhook_server import APPROVE_OR_DENY, FakeWebhook, ScriptedReply
from tests.fakes.whatsapp_server import FakeWhatsApp, SentMessage, post_json
from tests.support.daemon import DaemonProcess, write_config

pytestmark = pytest.mark.slow

ALICE = "15550001111"
PATH = "/whatsapp/webhook"


def profile(whatsapp: FakeWhatsApp, webhook: FakeWebhook, *, extra: str = "") -> str:
    return f"""\
agent: {{type: webhook, url: "{webhook.url}", timeout_s: 30}}
queue_mode: followup
{extra}channels:
  - type: whatsapp
    access_token: "{whatsapp.access_token}"
    phone_number_id: "{whatsapp.phone_number_id}"
    app_secret: "{whatsapp.app_secret}"
    verify_token: "{whatsapp.verify_token}"
    webhook_path: {PATH}
    api_base_url: {whatsapp.base_url}
    allow: [{ALICE}]
"""


def said(whatsapp: FakeWhatsApp, text: str) -> bool:
    return text in whatsapp.texts_to(ALICE)


def interactive_to(whatsapp: FakeWhatsApp) -> list[SentMessage]:
    return [m for m in whatsapp.sent if m.to == ALICE and m.kind == "interactive"]


async def started(config: Path) -> DaemonProcess:
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    await daemon.wait_log(logged("whatsapp.receiving"))
    return daemon


async def notify(whatsapp: FakeWhatsApp, daemon: DaemonProcess, body: bytes) -> int:
    """POST a notification to the daemon as Meta does, signed; the daemon's status."""
    status, _text = await post_json(daemon.http_url + PATH, body, whatsapp.signed_headers(body))
    return status


async def asked_with_buttons(
    whatsapp: FakeWhatsApp,
    webhook: FakeWebhook,
    daemon: DaemonProcess,
    buttons: list[list[dict[str, str]]] = APPROVE_OR_DENY,
) -> SentMessage:
    """The user asks; the agent answers with buttons: the interactive message holding them."""
    webhook.script(ScriptedReply(text="Approve the refund?", buttons=buttons))
    assert await notify(whatsapp, daemon, whatsapp.text_notification(ALICE, "refund please")) == 200
    await whatsapp.wait_until(lambda: interactive_to(whatsapp), WAIT_S)
    [held] = interactive_to(whatsapp)
    return held


async def test_buttons_are_reply_buttons_and_a_tap_reaches_the_agent_once(
    tmp_path: Path,
) -> None:
    async with FakeWhatsApp() as whatsapp, FakeWebhook() as webhook:
        daemon = await started(write_config(tmp_path, {"wa": profile(whatsapp, webhook)}))
        try:
            held = await asked_with_buttons(whatsapp, webhook, daemon)
            assert held.content == {
                "type": "button",
                "body": {"text": "Approve the refund?"},
                "action": {
                    "buttons": [
                        {"type": "reply", "reply": {"id": "refund:42:yes", "title": "Approve"}},
                        {"type": "reply", "reply": {"id": "refund:42:no", "title": "Deny"}},
                    ]
                },
            }

            # A slow agent: it answers only once the test has seen the tap's 200.
            webhook.script(ScriptedReply(text="Denied.", held=True))
            tap = whatsapp.tap_notification(ALICE, held.wamid, "refund:42:no", "Deny")
            answered = asyncio.create_task(notify(whatsapp, daemon, tap), name="whatsapp-tap")
            await webhook.control.holding.wait()
            # While the agent still holds its answer:
            assert await asyncio.wait_for(answered, WAIT_S) == 200
            assert await notify(whatsapp, daemon, tap) == 200  # Meta delivers it again
            assert not said(whatsapp, "Denied.")
            webhook.control.release.set()
            await whatsapp.wait_until(lambda: said(whatsapp, "Denied."), WAIT_S)
            assert webhook.taps() == [{"data": "refund:42:no", "message_id": held.wamid}]
            assert webhook.requests[-1].json["message"]["content"] == "Deny"

            # The buttons stay on the message: a second tap on them reaches no agent, and the
            # chat is told.
            asked = len(webhook.requests)
            late = whatsapp.tap_notification(ALICE, held.wamid, "refund:42:yes", "Approve")
            assert await notify(whatsapp, daemon, late) == 200
            await whatsapp.wait_until(
                lambda: any("Already answered" in text for text in whatsapp.texts_to(ALICE)),
                WAIT_S,
            )
            assert len(webhook.requests) == asked
            assert whatsapp.texts_to(ALICE).count("Denied.") == 1
        finally:
            await daemon.stop()


async def test_more_than_three_buttons_are_a_list_and_a_row_is_a_tap(tmp_path: Path) -> None:
    choices = [{"text": f"Option {n}", "data": f"option:{n}"} for n in range(1, 5)]
    async with FakeWhatsApp() as whatsapp, FakeWebhook() as webhook:
        daemon = await started(write_config(tmp_path, {"wa": profile(whatsapp, webhook)}))
        try:
            held = await asked_with_buttons(whatsapp, webhook, daemon, [choices])
            assert held.content["type"] == "list"
            assert held.content["body"] == {"text": "Approve the refund?"}
            [section] = held.content["action"]["sections"]
            assert section["rows"] == [
                {"id": f"option:{n}", "title": f"Option {n}"} for n in range(1, 5)
            ]

            webhook.script(ScriptedReply(text="Option 3 it is."))
            tap = whatsapp.tap_notification(ALICE, held.wamid, "option:3", "Option 3")
            assert await notify(whatsapp, daemon, tap) == 200
            assert await notify(whatsapp, daemon, tap) == 200
            await whatsapp.wait_until(lambda: said(whatsapp, "Option 3 it is."), WAIT_S)
            assert webhook.taps() == [{"data": "option:3", "message_id": held.wamid}]
            assert webhook.requests[-1].json["message"]["content"] == "Option 3"
        finally:
            await daemon.stop()


async def test_a_tap_is_answered_once_across_a_sigkill_after_its_200(tmp_path: Path) -> None:
    async with FakeWhatsApp() as whatsapp, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"wa": profile(whatsapp, webhook)})
        daemon = await started(config)
        try:
            held = await asked_with_buttons(whatsapp, webhook, daemon)
            # The agent is asked, and killed with the daemon before it answers; the restarted
            # daemon asks it again, for the same turn.
            webhook.script(ScriptedReply(text="Approved.", held=True))
            webhook.script(ScriptedReply(text="Approved."))
            tap = whatsapp.tap_notification(ALICE, held.wamid, "refund:42:yes", "Approve")
            answered = asyncio.create_task(notify(whatsapp, daemon, tap), name="whatsapp-tap")
            await webhook.control.holding.wait()
            assert await asyncio.wait_for(answered, WAIT_S) == 200
            daemon.signal(signal.SIGKILL)
            await daemon.wait()
            webhook.control.release.set()
            await webhook.control.client_disconnected.wait()
            daemon = await started(config)
            await whatsapp.wait_until(lambda: said(whatsapp, "Approved."), WAIT_S)
            # Meta delivers the webhook once more: the same tap, not a second one.
            assert await notify(whatsapp, daemon, tap) == 200
            duplicates = await daemon.metric(
                "octos_messages_in_total", profile="wa", channel="whatsapp", outcome="duplicate"
            )
            assert duplicates == 1
            assert webhook.taps() == [{"data": "refund:42:yes", "message_id": held.wamid}]
            assert whatsapp.texts_to(ALICE).count("Approved.") == 1
        finally:
            await daemon.stop()


def bot_text(whatsapp: FakeWhatsApp, text: str) -> SentMessage:
    [sent] = [m for m in whatsapp.sent if m.to == ALICE and m.kind == "text" and m.text == text]
    return sent


async def test_a_users_reaction_reaches_the_agent_once_with_inbound_reactions(
    tmp_path: Path,
) -> None:
    async with FakeWhatsApp() as whatsapp, FakeWebhook() as webhook:
        extra = 'inbound_reactions: true\nworking_reaction: "👀"\n'
        config = write_config(tmp_path, {"wa": profile(whatsapp, webhook, extra=extra)})
        daemon = await started(config)
        try:
            webhook.script(ScriptedReply(text="The refund is done."))
            assert (
                await notify(whatsapp, daemon, whatsapp.text_notification(ALICE, "refund")) == 200
            )
            await whatsapp.wait_until(lambda: said(whatsapp, "The refund is done."), WAIT_S)
            answer = bot_text(whatsapp, "The refund is done.")

            webhook.script(ScriptedReply(text="Glad it helped."))
            reacted = whatsapp.new_wamid()
            reaction = whatsapp.reaction_notification(ALICE, answer.wamid, "👍", wamid=reacted)
            assert await notify(whatsapp, daemon, reaction) == 200
            assert await notify(whatsapp, daemon, reaction) == 200  # Meta delivers it again
            await whatsapp.wait_until(lambda: said(whatsapp, "Glad it helped."), WAIT_S)
            # Taken back: no turn. The message after it is answered.
            taken_back = whatsapp.reaction_notification(ALICE, answer.wamid, "")
            assert await notify(whatsapp, daemon, taken_back) == 200
            webhook.script(ScriptedReply(text="Still here."))
            assert await notify(whatsapp, daemon, whatsapp.text_notification(ALICE, "hi?")) == 200
            await whatsapp.wait_until(lambda: said(whatsapp, "Still here."), WAIT_S)

            assert [post.json["message"]["content"] for post in webhook.requests] == [
                "refund",
                "[reaction 👍 to: The refund is done.]",
                "hi?",
            ]
            assert webhook.reactions() == [
                (
                    "[reaction 👍 to: The refund is done.]",
                    {"emoji": "👍", "message_id": answer.wamid},
                )
            ]
            # The working reaction goes on the two messages the user wrote, not on a reaction.
            reacted_to = {m.content["message_id"] for m in whatsapp.sent if m.kind == "reaction"}
            assert len(reacted_to) == 2
            assert reacted not in reacted_to
        finally:
            await daemon.stop()


async def test_a_users_reaction_reaches_no_agent_by_default(tmp_path: Path) -> None:
    async with FakeWhatsApp() as whatsapp, FakeWebhook() as webhook:
        daemon = await started(write_config(tmp_path, {"wa": profile(whatsapp, webhook)}))
        try:
            webhook.script(ScriptedReply(text="Hello."))
            assert await notify(whatsapp, daemon, whatsapp.text_notification(ALICE, "hi")) == 200
            await whatsapp.wait_until(lambda: said(whatsapp, "Hello."), WAIT_S)
            answer = bot_text(whatsapp, "Hello.")

            reaction = whatsapp.reaction_notification(ALICE, answer.wamid, "👍")
            assert await notify(whatsapp, daemon, reaction) == 200
            await daemon.wait_log(logged("intake.reaction_ignored"))
            webhook.script(ScriptedReply(text="Still here."))
            still = whatsapp.text_notification(ALICE, "still there?")
            assert await notify(whatsapp, daemon, still) == 200
            await whatsapp.wait_until(lambda: said(whatsapp, "Still here."), WAIT_S)
            assert webhook.reactions() == []
            assert [post.json["message"]["content"] for post in webhook.requests] == [
                "hi",
                "still there?",
            ]
        finally:
            await daemon.stop()
