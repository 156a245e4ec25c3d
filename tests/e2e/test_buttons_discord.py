"""Buttons and reactions on Discord, through the daemon subprocess, discord.py and the fake
Discord.

The webhook agent's reply with two buttons arrives as message components (an action row of two
buttons, each `custom_id` the button's data); a tap (INTERACTION_CREATE) reaches the agent as
`message.callback` once (also when Discord delivers it twice, and across a SIGKILL right after
its answer), the deferred update comes before the reply of an agent however slow, the used
buttons are disabled and a second tap reaches no agent; a tap on a message the bot did not put
that button under reaches no agent; a working reaction appears while the turn runs and goes.
"""

from __future__ import annotations

import copy
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged
from tests.fakes.discord_server import FakeDiscord, FakeUser
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply
from tests.support.daemon import DaemonProcess, write_config

pytestmark = pytest.mark.slow

ALICE = FakeUser(id=111_111_111_111_111_111, username="alice")
BUTTONS = [
    [{"text": "Approve", "data": "refund:42:yes"}, {"text": "Deny", "data": "refund:42:no"}],
    [{"text": "Policy", "url": "https://example.com/refunds"}],
]


def profile(discord: FakeDiscord, webhook: FakeWebhook, *, extra: str = "") -> str:
    return f"""\
agent: {{type: webhook, url: "{webhook.url}", timeout_s: 30}}
queue_mode: followup
{extra}channels:
  - type: discord
    token: "{discord.token}"
    api_base_url: {discord.api_base_url}
    gateway_url: {discord.gateway_url}
    allow: [{ALICE.id}]
"""


def buttons_of(message: dict[str, Any] | None) -> list[dict[str, Any]]:
    rows = (message or {}).get("components") or []
    return [button for row in rows for button in row["components"]]


def said(discord: FakeDiscord, chat: int, text: str) -> bool:
    return any(m.get("content") == text for m in discord.bot_messages(chat))


async def started(config: Path, discord: FakeDiscord) -> DaemonProcess:
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    await discord.wait_ready(timeout_s=WAIT_S)
    return daemon


async def asked_with_buttons(discord: FakeDiscord, webhook: FakeWebhook, chat: int) -> str:
    """The user asks; the agent answers with buttons: the id of the bot message."""
    webhook.script(ScriptedReply(text="Approve the refund?", buttons=BUTTONS))
    await discord.push_message(chat, ALICE, "refund please")
    await discord.wait_until(lambda: any(buttons_of(m) for m in discord.bot_messages(chat)), WAIT_S)
    [held] = [m for m in discord.bot_messages(chat) if buttons_of(m)]
    return str(held["id"])


async def test_buttons_render_and_a_tap_reaches_the_agent_once(tmp_path: Path) -> None:
    chat = 900_001
    async with FakeDiscord() as discord, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"dc": profile(discord, webhook)})
        daemon = await started(config, discord)
        try:
            held_id = await asked_with_buttons(discord, webhook, chat)
            held = discord.message(held_id)
            assert held is not None
            shown = copy.deepcopy(held)
            assert held["content"] == "Approve the refund?"
            assert held["components"] == [
                {
                    "type": 1,
                    "components": [
                        {"type": 2, "style": 1, "label": "Approve", "custom_id": "refund:42:yes"},
                        {"type": 2, "style": 1, "label": "Deny", "custom_id": "refund:42:no"},
                    ],
                },
                {
                    "type": 1,
                    "components": [
                        {
                            "type": 2,
                            "style": 5,
                            "label": "Policy",
                            "url": "https://example.com/refunds",
                        }
                    ],
                },
            ]

            # A slow agent: it answers only once the test has seen the tap answered.
            webhook.script(ScriptedReply(text="Denied.", held=True))
            tap = await discord.push_tap(chat, held_id, "refund:42:no", ALICE)
            await discord.push_tap(chat, held_id, "refund:42:no", ALICE, interaction_id=tap)
            await discord.wait_until(lambda: discord.interaction_answer(tap), WAIT_S)
            assert discord.interaction_answer(tap) == {"type": 6}
            await webhook.control.holding.wait()
            assert not said(discord, chat, "Denied.")
            webhook.control.release.set()
            await discord.wait_until(lambda: said(discord, chat, "Denied."), WAIT_S)
            [answer] = discord.requests_to("POST", rf"/interactions/{tap}/.+/callback")[:1]
            [reply] = [
                r
                for r in discord.requests_to("POST", rf"/channels/{chat}/messages")
                if r.json and r.json.get("content") == "Denied."
            ]
            assert answer.at < reply.at
            assert webhook.taps() == [{"data": "refund:42:no", "message_id": held_id}]
            assert webhook.requests[-1].json["message"]["content"] == "Deny"
            # Single use: the buttons are disabled, the text stays.
            await discord.wait_until(
                lambda: all(b.get("disabled") for b in buttons_of(discord.message(held_id))),
                WAIT_S,
            )
            assert discord.message(held_id)["content"] == "Approve the refund?"  # type: ignore[index]

            # A second tap (from an app still showing the buttons) reaches no agent.
            asked = len(webhook.requests)
            late = await discord.push_tap(chat, held_id, "refund:42:yes", ALICE, as_shown=shown)
            await discord.wait_until(
                lambda: any(
                    "Already answered" in str(m["content"]) for m in discord.bot_messages(chat)
                ),
                WAIT_S,
            )
            # The notice and the interaction's answer travel apart: either may come first.
            await discord.wait_until(lambda: discord.interaction_answer(late), WAIT_S)
            assert discord.interaction_answer(late) == {"type": 6}
            assert len(webhook.requests) == asked

            # A tap on a message whose buttons the bot did not put there: told, no turn.
            user_post = await discord.push_message(chat, ALICE, "a post of mine")
            forged_message = {**user_post, "components": shown["components"]}
            forged = await discord.push_tap(
                chat, user_post["id"], "refund:42:yes", ALICE, as_shown=forged_message
            )
            await discord.wait_until(lambda: discord.interaction_answer(forged), WAIT_S)
            assert discord.interaction_answer(forged) == {
                "type": 4,
                "data": {
                    "content": "Already answered: these buttons are no longer available.",
                    "flags": 64,
                },
            }
            # The post itself is a message the agent may be asked about; the tap on it is not.
            assert webhook.taps() == [{"data": "refund:42:no", "message_id": held_id}]
        finally:
            await daemon.stop()


async def test_a_tap_is_answered_once_across_a_sigkill_after_its_answer(tmp_path: Path) -> None:
    chat = 900_002
    async with FakeDiscord() as discord, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"dc": profile(discord, webhook)})
        daemon = await started(config, discord)
        try:
            held_id = await asked_with_buttons(discord, webhook, chat)
            # The agent is asked, and killed with the daemon before it answers; the restarted
            # daemon asks it again, for the same turn.
            webhook.script(ScriptedReply(text="Approved.", held=True))
            webhook.script(ScriptedReply(text="Approved."))
            tap = await discord.push_tap(chat, held_id, "refund:42:yes", ALICE)
            await discord.wait_until(lambda: discord.interaction_answer(tap), WAIT_S)
            await webhook.control.holding.wait()
            daemon.signal(signal.SIGKILL)
            await daemon.wait()
            webhook.control.release.set()
            await webhook.control.client_disconnected.wait()
            daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
            await discord.wait_until(lambda: said(discord, chat, "Approved."), WAIT_S)
            # Discord delivers the tap once more: the same tap, not a second one.
            await daemon.wait_log(logged("profile.started"))
            await discord.wait_until(lambda: len(discord.live_sessions) >= 1, WAIT_S)
            await discord.push_tap(chat, held_id, "refund:42:yes", ALICE, interaction_id=tap)
            await daemon.wait_log(logged("discord.tap_not_answered"))
            assert webhook.taps() == [{"data": "refund:42:yes", "message_id": held_id}]
            texts = [m.get("content") for m in discord.bot_messages(chat)]
            assert texts.count("Approved.") == 1
        finally:
            await daemon.stop()


async def test_a_working_reaction_appears_while_the_turn_runs_and_goes(tmp_path: Path) -> None:
    chat = 900_003
    async with FakeDiscord() as discord, FakeWebhook() as webhook:
        extra = 'working_reaction: "👀"\n'
        config = write_config(tmp_path, {"dc": profile(discord, webhook, extra=extra)})
        daemon = await started(config, discord)
        try:
            webhook.script(ScriptedReply(text="Looked.", held=True, reaction="👍"))
            asked = await discord.push_message(chat, ALICE, "have a look")

            def reactions() -> list[str]:
                message = discord.message(asked["id"]) or {}
                return [r["emoji"]["name"] for r in message.get("reactions", [])]

            await webhook.control.holding.wait()
            await discord.wait_until(lambda: reactions() == ["👀"], WAIT_S)
            webhook.control.release.set()
            await discord.wait_until(lambda: said(discord, chat, "Looked."), WAIT_S)
            await discord.wait_until(lambda: reactions() == ["👍"], WAIT_S)
        finally:
            await daemon.stop()
