"""Buttons and reactions on Slack, through the daemon subprocess and the fake Slack over Socket
Mode.

The webhook agent's reply with two buttons arrives as a Block Kit `actions` block on the reply;
a tap (a `block_actions` payload) reaches the agent as `message.callback` once (also when Slack
delivers it twice, and across a SIGKILL right after its ack), the ack comes before the reply of
an agent however slow, the used buttons are taken off and a second tap reaches no agent; a tap
on a message the bot did not put that button under reaches no agent; a working reaction appears
while the turn runs and goes after it.
"""

from __future__ import annotations

import copy
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged
from tests.fakes.slack_server import FakeSlack
from tests.fakes.webhook_server import APPROVE_OR_DENY, FakeWebhook, ScriptedReply
from tests.support.daemon import DaemonProcess, write_config

pytestmark = pytest.mark.slow

ALICE = "UALICE0001"


def profile(slack: FakeSlack, webhook: FakeWebhook, *, extra: str = "") -> str:
    return f"""\
agent: {{type: webhook, url: "{webhook.url}", timeout_s: 30}}
queue_mode: followup
{extra}channels:
  - type: slack
    bot_token: "{slack.bot_token}"
    app_token: "{slack.app_token}"
    base_url: {slack.base_url}
    allow: [{ALICE}]
"""


def said(slack: FakeSlack, chat: str, text: str) -> bool:
    return any(m.get("text") == text for m in slack.bot_messages(chat))


async def started(config: Path, slack: FakeSlack, count: int = 1) -> DaemonProcess:
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    await slack.wait_connected(count, timeout_s=WAIT_S)
    return daemon


async def asked_with_buttons(slack: FakeSlack, webhook: FakeWebhook, chat: str) -> str:
    """The user asks; the agent answers with two buttons: the ts of the bot message."""
    webhook.script(ScriptedReply(text="Approve the refund?", buttons=APPROVE_OR_DENY))
    await slack.push_event(slack.user_message(chat, ALICE, "refund please", channel_type="im"))
    await slack.wait_until(
        lambda: any(slack.buttons_of(chat, m["ts"]) for m in slack.bot_messages(chat)), WAIT_S
    )
    [held] = [m for m in slack.bot_messages(chat) if slack.buttons_of(chat, m["ts"])]
    return str(held["ts"])


async def test_buttons_render_and_a_tap_reaches_the_agent_once(tmp_path: Path) -> None:
    chat = "DBUTTONS01"
    async with FakeSlack() as slack, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"sl": profile(slack, webhook)})
        daemon = await started(config, slack)
        try:
            held_ts = await asked_with_buttons(slack, webhook, chat)
            held = slack.message(chat, held_ts)
            assert held is not None
            shown = copy.deepcopy(held)
            assert held["text"] == "Approve the refund?"
            assert [block["type"] for block in held["blocks"]] == ["section", "actions"]
            assert held["blocks"][0]["text"]["text"] == "Approve the refund?"
            assert [
                (button["text"]["text"], button["value"])
                for button in slack.buttons_of(chat, held_ts)
            ] == [("Approve", "refund:42:yes"), ("Deny", "refund:42:no")]

            # A slow agent: it answers only once the test has seen the tap acknowledged.
            webhook.script(ScriptedReply(text="Denied.", held=True))
            tap = slack.tap_payload(chat, held_ts, "refund:42:no", ALICE)
            first = await slack.push_interactive(tap)
            again = await slack.push_interactive(tap)  # Slack delivers the same tap twice
            await slack.wait_until(lambda: slack.acked(first) and slack.acked(again), WAIT_S)
            await webhook.control.holding.wait()
            assert not said(slack, chat, "Denied.")
            webhook.control.release.set()
            await slack.wait_until(lambda: said(slack, chat, "Denied."), WAIT_S)
            [reply] = [c for c in slack.calls("chat.postMessage") if c.params["text"] == "Denied."]
            assert slack.acked_at[first] < reply.at
            assert webhook.taps() == [{"data": "refund:42:no", "message_id": held_ts}]
            assert webhook.requests[-1].json["message"]["content"] == "Deny"
            # Single use: the buttons are taken off, the text stays.
            await slack.wait_until(lambda: not slack.buttons_of(chat, held_ts), WAIT_S)
            assert slack.message(chat, held_ts)["text"] == "Approve the refund?"  # type: ignore[index]

            # A second tap (from an app still showing the buttons) reaches no agent.
            asked = len(webhook.requests)
            late = await slack.push_interactive(
                slack.tap_payload(chat, held_ts, "refund:42:yes", ALICE, as_shown=shown)
            )
            await slack.wait_until(
                lambda: any(
                    "Already answered" in str(m.get("text")) for m in slack.bot_messages(chat)
                ),
                WAIT_S,
            )
            assert slack.acked(late)
            assert len(webhook.requests) == asked

            # A tap on a message whose buttons the bot did not put there: acknowledged, no turn.
            user_post = slack.user_message(chat, ALICE, "a post of mine", channel_type="im")
            forged_message = {**user_post, "blocks": shown["blocks"]}
            forged = await slack.push_interactive(
                slack.tap_payload(
                    chat, user_post["ts"], "refund:42:yes", ALICE, as_shown=forged_message
                )
            )
            await slack.wait_until(lambda: slack.acked(forged), WAIT_S)
            await daemon.wait_log(logged("slack.tap_not_taken"))
            assert len(webhook.requests) == asked
        finally:
            await daemon.stop()


async def test_a_tap_is_answered_once_across_a_sigkill_after_its_ack(tmp_path: Path) -> None:
    chat = "DBUTTONS02"
    async with FakeSlack() as slack, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"sl": profile(slack, webhook)})
        daemon = await started(config, slack)
        try:
            held_ts = await asked_with_buttons(slack, webhook, chat)
            # The agent is asked, and killed with the daemon before it answers; the restarted
            # daemon asks it again, for the same turn.
            webhook.script(ScriptedReply(text="Approved.", held=True))
            webhook.script(ScriptedReply(text="Approved."))
            tap = slack.tap_payload(chat, held_ts, "refund:42:yes", ALICE)
            envelope = await slack.push_interactive(tap)
            await slack.wait_until(lambda: slack.acked(envelope), WAIT_S)
            await webhook.control.holding.wait()
            daemon.signal(signal.SIGKILL)
            await daemon.wait()
            webhook.control.release.set()
            await webhook.control.client_disconnected.wait()
            daemon = await started(config, slack, count=2)
            await slack.wait_until(lambda: said(slack, chat, "Approved."), WAIT_S)
            # Slack delivers the tap once more: the same tap, not a second one.
            again = await slack.push_interactive(tap)
            await slack.wait_until(lambda: slack.acked(again), WAIT_S)
            await daemon.wait_log(logged("profile.started"))
            assert webhook.taps() == [{"data": "refund:42:yes", "message_id": held_ts}]
            texts = [m.get("text") for m in slack.bot_messages(chat)]
            assert texts.count("Approved.") == 1
        finally:
            await daemon.stop()


async def test_a_working_reaction_appears_while_the_turn_runs_and_goes(tmp_path: Path) -> None:
    chat = "DBUTTONS03"
    async with FakeSlack() as slack, FakeWebhook() as webhook:
        extra = 'working_reaction: "👀"\n'
        config = write_config(tmp_path, {"sl": profile(slack, webhook, extra=extra)})
        daemon = await started(config, slack)
        try:
            webhook.script(ScriptedReply(text="Looked.", held=True, reaction="👍"))
            post = slack.user_message(chat, ALICE, "have a look", channel_type="im")
            await slack.push_event(post)
            key = (chat, post["ts"])
            await webhook.control.holding.wait()
            await slack.wait_until(lambda: slack.reactions.get(key) == ["eyes"], WAIT_S)
            webhook.control.release.set()
            await slack.wait_until(lambda: said(slack, chat, "Looked."), WAIT_S)
            await slack.wait_until(lambda: slack.reactions.get(key) == ["+1"], WAIT_S)
            assert [c.params["name"] for c in slack.calls("reactions.add")] == ["eyes", "+1"]
            assert [c.params["name"] for c in slack.calls("reactions.remove")] == ["eyes"]
        finally:
            await daemon.stop()
