"""Edits, deletes and replies through the daemon subprocess and the platform fakes.

A Telegram edit of a message still waiting behind a running turn runs one turn, on the new
text; an edit after its turn is done is a new turn marked as an edit; an edited `/reset` is no
second reset; a Slack or a Discord delete of a waiting message drops it (and a Discord edit replaces
it); a Telegram reply to the bot's
message reaches the webhook agent as `message.reply_to` with the quoted text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged
from tests.fakes.discord_server import FakeDiscord, FakeUser
from tests.fakes.gated_webhook import GatedWebhook
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply
from tests.support.daemon import DaemonProcess, write_config

pytestmark = pytest.mark.slow

USER = 6160
ALICE = "UALICE0001"
DISCORD_ALICE = FakeUser(id=111_111_111_111_111_111, username="alice")


def telegram_profile(telegram: FakeTelegram, hook_url: str) -> str:
    return f"""\
agent: {{type: webhook, url: "{hook_url}", timeout_s: 30}}
queue_mode: followup
channels:
  - type: telegram
    token: "{telegram.token}"
    base_url: {telegram.base_url}
    base_file_url: {telegram.base_file_url}
    poll_timeout_s: 2
    allow: [{USER}]
"""


def slack_profile(slack: FakeSlack, hook_url: str) -> str:
    return f"""\
agent: {{type: webhook, url: "{hook_url}", timeout_s: 30}}
queue_mode: followup
channels:
  - type: slack
    bot_token: "{slack.bot_token}"
    app_token: "{slack.app_token}"
    base_url: {slack.base_url}
    allow: [{ALICE}]
"""


def discord_profile(discord: FakeDiscord, hook_url: str) -> str:
    return f"""\
agent: {{type: webhook, url: "{hook_url}", timeout_s: 30}}
queue_mode: followup
channels:
  - type: discord
    token: "{discord.token}"
    api_base_url: {discord.api_base_url}
    gateway_url: {discord.gateway_url}
    allow: [{DISCORD_ALICE.id}]
"""


def shown(telegram: FakeTelegram, chat: int) -> list[str]:
    return [str(m.get("text")) for m in telegram.bot_messages(chat)]


async def test_telegram_edits_before_and_after_the_turn(tmp_path: Path) -> None:
    chat = USER
    async with FakeTelegram() as telegram, GatedWebhook() as hook:
        config = write_config(tmp_path, {"tg": telegram_profile(telegram, hook.url)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            # The agent is held on an earlier message: the one edited waits behind it.
            gate = hook.hold("hold")
            telegram.push_message(chat, "first, hold on", user_id=USER)
            await hook.wait_for(lambda: hook.asked("hold") == 1)
            typo = telegram.push_message(chat, "secnod", user_id=USER)
            telegram.push_edit(chat, typo["message_id"], "second", edit_date=1_700_000_001)
            # The same edit delivered twice is one edit.
            telegram.push_edit(chat, typo["message_id"], "second", edit_date=1_700_000_001)
            await telegram.wait_until(lambda: not telegram.pending_update_ids, timeout_s=WAIT_S)
            gate.set()
            await telegram.wait_until(lambda: "second" in shown(telegram, chat), timeout_s=WAIT_S)
            assert hook.turns == ["first, hold on", "second"]

            # After its turn, an edit is a new turn, marked, quoting the earlier text.
            telegram.push_edit(chat, typo["message_id"], "second!", edit_date=1_700_000_002)
            await hook.wait_for(lambda: len(hook.turns) == 3)
            assert hook.turns[2] == '[edited] second!\n(earlier: "second")'
            await telegram.wait_until(lambda: len(shown(telegram, chat)) == 3, timeout_s=WAIT_S)
            [*_, edit_reply] = telegram.calls("sendMessage")
            # The answer to an edit replies to the message edited.
            assert edit_reply.params["reply_parameters"]["message_id"] == typo["message_id"]
        finally:
            await daemon.stop()


async def edited_commands_are_not_run(
    telegram: FakeTelegram, hook: GatedWebhook, chat: int, watcher: DaemonProcess, ignored: str
) -> None:
    """An edited `/reset`, and a text edited into `/reset`, run nothing: `watcher` (the
    process that decides) logs each as `ignored`, and the chat's history outlives both."""
    telegram.push_message(chat, "remember me", user_id=USER)
    await telegram.wait_until(lambda: len(shown(telegram, chat)) == 1, timeout_s=WAIT_S)
    reset = telegram.push_message(chat, "/reset", user_id=USER)
    await telegram.wait_until(lambda: len(shown(telegram, chat)) == 2, timeout_s=WAIT_S)
    after_reset = shown(telegram, chat)[1]
    telegram.push_edit(chat, reset["message_id"], "/reset now", edit_date=1_700_000_003)
    await watcher.wait_log(logged(ignored))
    # An edit of text into a command is not run either.
    asked = telegram.push_message(chat, "still here?", user_id=USER)
    await telegram.wait_until(lambda: len(shown(telegram, chat)) == 3, timeout_s=WAIT_S)
    telegram.push_edit(chat, asked["message_id"], "/reset", edit_date=1_700_000_004)
    await watcher.wait_logged(ignored, more_than=1)
    telegram.push_message(chat, "last", user_id=USER)
    await telegram.wait_until(lambda: len(shown(telegram, chat)) == 4, timeout_s=WAIT_S)
    assert shown(telegram, chat)[2:] == ["still here?", "last"]
    assert shown(telegram, chat).count(after_reset) == 1
    assert hook.turns == ["remember me", "still here?", "last"]


async def test_an_edited_reset_is_not_a_second_reset(tmp_path: Path) -> None:
    chat = USER + 1
    async with FakeTelegram() as telegram, GatedWebhook() as hook:
        config = write_config(tmp_path, {"tg": telegram_profile(telegram, hook.url)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            await edited_commands_are_not_run(telegram, hook, chat, daemon, "intake.edit_ignored")
        finally:
            await daemon.stop()


async def test_a_telegram_reply_reaches_the_agent_with_the_quoted_text(tmp_path: Path) -> None:
    chat = USER + 2
    async with FakeTelegram() as telegram, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"tg": telegram_profile(telegram, webhook.url)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            webhook.script(ScriptedReply(text="The refund is 42 euros."))
            webhook.script(ScriptedReply(text="Yes."))
            telegram.push_message(chat, "how much?", user_id=USER)
            await telegram.wait_until(lambda: len(shown(telegram, chat)) == 1, timeout_s=WAIT_S)
            [answer] = telegram.bot_messages(chat)
            telegram.push_message(
                chat, "is that final?", user_id=USER, reply_to_message_id=answer["message_id"]
            )
            await telegram.wait_until(lambda: len(shown(telegram, chat)) == 2, timeout_s=WAIT_S)
            first, second = (post.json["message"] for post in webhook.requests)
            assert "reply_to" not in first
            assert second["content"] == "is that final?"
            assert second["reply_to"] == {
                "message_id": str(answer["message_id"]),
                "text": "The refund is 42 euros.",
                "from": "bot",
            }
        finally:
            await daemon.stop()


async def test_a_slack_delete_drops_a_waiting_message(tmp_path: Path) -> None:
    dm = "DEDITS0001"
    async with FakeSlack() as slack, GatedWebhook() as hook:
        config = write_config(tmp_path, {"sl": slack_profile(slack, hook.url)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            await slack.wait_connected(timeout_s=WAIT_S)
            gate = hook.hold("hold")
            await slack.push_event(slack.user_message(dm, ALICE, "hold on", channel_type="im"))
            await hook.wait_for(lambda: hook.asked("hold") == 1)
            doomed = slack.user_message(dm, ALICE, "never mind this", channel_type="im")
            await slack.push_event(doomed)
            deleted = slack.deletion_of(doomed)
            _, envelope = await slack.push_event(deleted)
            await slack.wait_until(lambda: slack.acked(envelope), WAIT_S)
            await daemon.wait_log(logged("intake.deleted"))
            await slack.push_event(slack.user_message(dm, ALICE, "and this", channel_type="im"))
            gate.set()
            await slack.wait_until(
                lambda: [m["text"] for m in slack.bot_messages(dm)] == ["hold on", "and this"],
                WAIT_S,
            )
            assert hook.turns == ["hold on", "and this"]
        finally:
            await daemon.stop()


async def test_a_discord_edit_and_delete_of_waiting_messages(tmp_path: Path) -> None:
    dm = 424_242
    async with FakeDiscord() as discord, GatedWebhook() as hook:
        config = write_config(tmp_path, {"dc": discord_profile(discord, hook.url)})
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            await daemon.wait_log(logged("discord.gateway_ready"))
            gate = hook.hold("hold")
            await discord.push_message(dm, DISCORD_ALICE, "hold on")
            await hook.wait_for(lambda: hook.asked("hold") == 1)
            typo = await discord.push_message(dm, DISCORD_ALICE, "secnod")
            doomed = await discord.push_message(dm, DISCORD_ALICE, "never mind this")
            edited = {**typo, "content": "second", "edited_timestamp": "2026-01-01T00:00:01+00:00"}
            await discord.push_dispatch("MESSAGE_UPDATE", edited)
            await daemon.wait_log(logged("intake.edit_replaced"))
            await discord.push_dispatch(
                "MESSAGE_DELETE", {"id": doomed["id"], "channel_id": str(dm)}
            )
            await daemon.wait_log(logged("intake.deleted"))
            gate.set()
            await hook.wait_for(lambda: len(hook.turns) == 2)
            await discord.wait_until(lambda: len(discord.bot_messages(dm)) == 2, WAIT_S)
            assert hook.turns == ["hold on", "second"]
        finally:
            await daemon.stop()
