"""Buttons and reactions on Telegram, through the daemon subprocess and the fake Bot API.

The webhook agent's reply with two buttons arrives as an inline keyboard; a tap reaches the
agent as `message.callback` once (also when Telegram delivers it twice, and across a SIGKILL
right after the tap was answered), `answerCallbackQuery` comes before the agent's reply however
slow the agent is, the used keyboard is taken off and a second tap reaches no agent; a working
reaction appears while the turn runs and goes after it; a user's reaction reaches the agent
once with `inbound_reactions`, and no agent without.
"""

from __future__ import annotations

import copy
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.webhook_server import APPROVE_OR_DENY, FakeWebhook, ScriptedReply
from tests.support.daemon import DaemonProcess, write_config

pytestmark = pytest.mark.slow

USER = 5150


def profile(telegram: FakeTelegram, webhook: FakeWebhook, *, extra: str = "") -> str:
    return f"""\
agent: {{type: webhook, url: "{webhook.url}", timeout_s: 30}}
queue_mode: followup
{extra}channels:
  - type: telegram
    token: "{telegram.token}"
    base_url: {telegram.base_url}
    base_file_url: {telegram.base_file_url}
    poll_timeout_s: 2
    allow: [{USER}]
"""


def keyboard_of(message: dict[str, Any]) -> list[list[dict[str, Any]]]:
    markup = message.get("reply_markup") or {}
    keyboard: list[list[dict[str, Any]]] = markup.get("inline_keyboard", [])
    return keyboard


async def asked_with_buttons(telegram: FakeTelegram, webhook: FakeWebhook, chat: int) -> int:
    """The user asks; the agent answers with two buttons: the bot message holding them."""
    webhook.script(ScriptedReply(text="Approve the refund?", buttons=APPROVE_OR_DENY))
    telegram.push_message(chat, "refund please", user_id=USER)
    await telegram.wait_until(
        lambda: any(keyboard_of(m) for m in telegram.bot_messages(chat)), timeout_s=WAIT_S
    )
    [held] = [m for m in telegram.bot_messages(chat) if keyboard_of(m)]
    return int(held["message_id"])


async def test_buttons_render_and_a_tap_reaches_the_agent_once(tmp_path: Path) -> None:
    chat = USER
    async with FakeTelegram() as telegram, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"tg": profile(telegram, webhook)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            held_id = await asked_with_buttons(telegram, webhook, chat)
            [held] = [m for m in telegram.bot_messages(chat) if m["message_id"] == held_id]
            shown = copy.deepcopy(held)
            assert held["text"] == "Approve the refund?"
            assert keyboard_of(held) == [
                [
                    {"text": "Approve", "callback_data": "refund:42:yes"},
                    {"text": "Deny", "callback_data": "refund:42:no"},
                ]
            ]

            # A slow agent: it answers only once the test has seen the tap answered.
            webhook.script(ScriptedReply(text="Denied.", held=True))
            query = telegram.push_tap(chat, held_id, "refund:42:no", user_id=USER)
            telegram.push_tap(chat, held_id, "refund:42:no", user_id=USER, query_id=query)
            answers = await telegram.wait_for_calls("answerCallbackQuery", count=1)
            await webhook.control.holding.wait()
            assert not any(m.get("text") == "Denied." for m in telegram.bot_messages(chat))
            webhook.control.release.set()
            await telegram.wait_until(
                lambda: any(m.get("text") == "Denied." for m in telegram.bot_messages(chat)),
                timeout_s=WAIT_S,
            )
            [reply] = [r for r in telegram.calls("sendMessage") if r.params["text"] == "Denied."]
            assert answers[0].at < reply.at
            assert webhook.taps() == [{"data": "refund:42:no", "message_id": str(held_id)}]
            assert webhook.requests[-1].json["message"]["content"] == "Deny"
            # Single use: the keyboard is taken off.
            await telegram.wait_until(
                lambda: not keyboard_of(telegram.state.messages[(chat, held_id)]),
                timeout_s=WAIT_S,
            )

            # A second tap (from an app still showing the keyboard) reaches no agent.
            asked = len(webhook.requests)
            telegram.push_tap(chat, held_id, "refund:42:yes", user_id=USER, as_shown=shown)
            await telegram.wait_until(
                lambda: any(
                    "Already answered" in str(m.get("text")) for m in telegram.bot_messages(chat)
                ),
                timeout_s=WAIT_S,
            )
            await telegram.wait_for_calls("answerCallbackQuery", count=3)
            assert len(webhook.requests) == asked
            # A tap on a keyboard Telegram no longer shows is only answered, with a notice.
            telegram.push_tap(chat, held_id, "refund:42:yes", user_id=USER)
            [*_, late] = await telegram.wait_for_calls("answerCallbackQuery", count=4)
            assert "Already answered" in late.params["text"]
            assert len(webhook.requests) == asked
        finally:
            await daemon.stop()


async def test_a_tap_is_answered_once_across_a_sigkill_after_its_acknowledgement(
    tmp_path: Path,
) -> None:
    chat = USER + 1
    async with FakeTelegram() as telegram, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"tg": profile(telegram, webhook)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            held_id = await asked_with_buttons(telegram, webhook, chat)
            # The agent is asked, and killed with the daemon before it answers; the restarted
            # daemon asks it again, for the same turn.
            webhook.script(ScriptedReply(text="Approved.", held=True))
            webhook.script(ScriptedReply(text="Approved."))
            telegram.push_tap(chat, held_id, "refund:42:yes", user_id=USER)
            await telegram.wait_for_calls("answerCallbackQuery", count=1)
            await webhook.control.holding.wait()
            daemon.signal(signal.SIGKILL)
            await daemon.wait()
            webhook.control.release.set()
            await webhook.control.client_disconnected.wait()
            daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
            await telegram.wait_until(
                lambda: any(m.get("text") == "Approved." for m in telegram.bot_messages(chat)),
                timeout_s=WAIT_S,
            )
            # Telegram delivered the tap again (its offset was not confirmed): one turn still.
            await daemon.wait_log(logged("profile.started"))
            assert webhook.taps() == [{"data": "refund:42:yes", "message_id": str(held_id)}]
            assert [m.get("text") for m in telegram.bot_messages(chat)].count("Approved.") == 1
        finally:
            await daemon.stop()


async def test_a_working_reaction_appears_while_the_turn_runs_and_goes(tmp_path: Path) -> None:
    chat = USER + 2
    async with FakeTelegram() as telegram, FakeWebhook() as webhook:
        extra = 'working_reaction: "👀"\n'
        config = write_config(tmp_path, {"tg": profile(telegram, webhook, extra=extra)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            webhook.script(ScriptedReply(text="Looked.", held=True, reaction="👍"))
            asked = telegram.push_message(chat, "have a look", user_id=USER)
            key = (chat, asked["message_id"])
            await webhook.control.holding.wait()
            await telegram.wait_until(lambda: key in telegram.state.reactions, timeout_s=WAIT_S)
            assert telegram.state.reactions[key] == [{"type": "emoji", "emoji": "👀"}]
            webhook.control.release.set()
            await telegram.wait_until(
                lambda: any(m.get("text") == "Looked." for m in telegram.bot_messages(chat)),
                timeout_s=WAIT_S,
            )
            # The working reaction went, and the agent's own took its place.
            await telegram.wait_until(
                lambda: telegram.state.reactions.get(key) == [{"type": "emoji", "emoji": "👍"}],
                timeout_s=WAIT_S,
            )
            reactions = [r.params.get("reaction") for r in telegram.calls("setMessageReaction")]
            assert reactions == [
                [{"type": "emoji", "emoji": "👀"}],
                [],
                [{"type": "emoji", "emoji": "👍"}],
            ]
        finally:
            await daemon.stop()


async def test_a_users_reaction_reaches_the_agent_once_with_inbound_reactions(
    tmp_path: Path,
) -> None:
    chat = USER + 3
    async with FakeTelegram() as telegram, FakeWebhook() as webhook:
        extra = "inbound_reactions: true\n"
        config = write_config(tmp_path, {"tg": profile(telegram, webhook, extra=extra)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            webhook.script(ScriptedReply(text="The refund is done."))
            telegram.push_message(chat, "refund please", user_id=USER)
            await telegram.wait_until(lambda: bool(telegram.bot_messages(chat)), timeout_s=WAIT_S)
            [bot_message] = telegram.bot_messages(chat)
            bot_id = int(bot_message["message_id"])
            # Telegram sends reactions only to a bot that asks for them.
            [poll, *_] = await telegram.wait_for_calls("getUpdates")
            assert "message_reaction" in str(poll.params.get("allowed_updates"))

            webhook.script(ScriptedReply(text="Glad it helped."))
            # Telegram names only the message: the daemon quotes the text it sent.
            update_id = telegram.push_reaction(chat, bot_id, "👍", user_id=USER)
            # Delivered twice (a server that lost the confirmation): one reaction.
            telegram.push_reaction(chat, bot_id, "👍", user_id=USER, update_id=update_id)
            await telegram.wait_until(
                lambda: any(
                    m.get("text") == "Glad it helped." for m in telegram.bot_messages(chat)
                ),
                timeout_s=WAIT_S,
            )
            assert webhook.reactions() == [
                (
                    "[reaction 👍 to: The refund is done.]",
                    {"emoji": "👍", "message_id": str(bot_id)},
                )
            ]
            # The working reaction and the agent's reaction go on messages, not on reactions.
            assert not telegram.calls("setMessageReaction")
        finally:
            await daemon.stop()


async def test_a_users_reaction_reaches_no_agent_by_default(tmp_path: Path) -> None:
    chat = USER + 4
    async with FakeTelegram() as telegram, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"tg": profile(telegram, webhook)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            webhook.script(ScriptedReply(text="Hello."))
            telegram.push_message(chat, "hi", user_id=USER)
            await telegram.wait_until(lambda: bool(telegram.bot_messages(chat)), timeout_s=WAIT_S)
            [bot_message] = telegram.bot_messages(chat)
            asked_for = [str(p.params.get("allowed_updates")) for p in telegram.calls("getUpdates")]
            assert not any("message_reaction" in each for each in asked_for)

            # One sent anyway is dropped at the intake; the message after it is answered.
            telegram.push_reaction(chat, int(bot_message["message_id"]), "👍", user_id=USER)
            webhook.script(ScriptedReply(text="Still here."))
            telegram.push_message(chat, "still there?", user_id=USER)
            await telegram.wait_until(
                lambda: any(m.get("text") == "Still here." for m in telegram.bot_messages(chat)),
                timeout_s=WAIT_S,
            )
            assert webhook.reactions() == []
            assert [post.json["message"]["content"] for post in webhook.requests] == [
                "hi",
                "still there?",
            ]
        finally:
            await daemon.stop()
