"""Buttons and reactions in a cluster (NATS and PostgreSQL, Telegram on the fake): two taps on
one button reach the webhook agent once, the second answered "already answered" from the
cluster's table of used buttons, and the used keyboard is taken off the message; a tap on a
message older than `buttons_ttl_s` reaches no agent and is told the buttons expired; a working
reaction appears while the turn runs on a worker and goes after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.buttons import BUTTON_ALREADY_USED, BUTTON_EXPIRED
from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.conftest import WAIT_S
from tests.e2e.telegram_profiles import polling_profile
from tests.e2e.test_buttons_telegram import USER, asked_with_buttons, keyboard_of
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow


async def test_two_taps_on_one_button_reach_the_agent_once_and_the_keyboard_goes(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    chat = USER
    async with FakeTelegram() as fake, FakeWebhook() as webhook, processes() as running:
        agent = f'{{type: webhook, url: "{webhook.url}", timeout_s: 30}}'
        text = polling_profile(fake, USER, agent) + "buttons_ttl_s: 3600\n"
        config = cluster_config(tmp_path, {profile: text}, prefix=nats_prefix, dsn=postgres_dsn)
        running.append(await start_role(config, "worker"))
        running.append(await start_role(config, "worker"))
        running.append(await start_role(config, "ingress"))

        def said(words: str) -> bool:
            return any(words in str(m.get("text")) for m in fake.bot_messages(chat))

        held_id = await asked_with_buttons(fake, webhook, chat)
        webhook.script(ScriptedReply(text="Denied."))
        fake.push_tap(chat, held_id, "refund:42:no", user_id=USER)
        fake.push_tap(chat, held_id, "refund:42:yes", user_id=USER)
        await fake.wait_until(lambda: said("Denied.") and said(BUTTON_ALREADY_USED), timeout_s=30)
        assert webhook.taps() == [{"data": "refund:42:no", "message_id": str(held_id)}]
        # Single use: the worker whose tap passed has the ingress take the keyboard off.
        await fake.wait_until(
            lambda: not keyboard_of(fake.state.messages[(chat, held_id)]), timeout_s=WAIT_S
        )
        # Once, by the tap that passed (the keyboard was put on by the same method).
        taken_off = [
            call.params
            for call in fake.calls("editMessageReplyMarkup")
            if not call.params.get("reply_markup")
        ]
        assert [int(params["message_id"]) for params in taken_off] == [held_id]


async def test_a_tap_after_the_buttons_ttl_reaches_no_agent(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    chat = USER + 20
    async with FakeTelegram() as fake, FakeWebhook() as webhook, processes() as running:
        agent = f'{{type: webhook, url: "{webhook.url}", timeout_s: 30}}'
        text = polling_profile(fake, USER, agent) + "buttons_ttl_s: 60\n"
        config = cluster_config(tmp_path, {profile: text}, prefix=nats_prefix, dsn=postgres_dsn)
        running.append(await start_role(config, "worker"))
        running.append(await start_role(config, "ingress"))

        held_id = await asked_with_buttons(fake, webhook, chat)
        # Telegram's tap carries the message tapped, with the date it was sent: an hour ago,
        # beyond the buttons' 60 seconds.
        held = fake.state.messages[(chat, held_id)]
        sent_long_ago = {**held, "date": held["date"] - 3600}
        fake.push_tap(chat, held_id, "refund:42:yes", user_id=USER, as_shown=sent_long_ago)
        await fake.wait_until(
            lambda: any(m.get("text") == BUTTON_EXPIRED for m in fake.bot_messages(chat)),
            timeout_s=WAIT_S,
        )
        await fake.wait_for_calls("answerCallbackQuery", count=1)
        assert webhook.taps() == []
        assert len(webhook.requests) == 1  # the question that showed the buttons
        # An expired tap uses nothing: the keyboard stays as it was.
        assert keyboard_of(fake.state.messages[(chat, held_id)])


async def test_a_working_reaction_appears_while_a_workers_turn_runs_and_goes(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    chat = USER + 10
    async with FakeTelegram() as fake, FakeWebhook() as webhook, processes() as running:
        agent = f'{{type: webhook, url: "{webhook.url}", timeout_s: 30}}'
        text = polling_profile(fake, chat, agent) + 'working_reaction: "👀"\n'
        config = cluster_config(tmp_path, {profile: text}, prefix=nats_prefix, dsn=postgres_dsn)
        running.append(await start_role(config, "worker"))
        running.append(await start_role(config, "ingress"))

        webhook.script(ScriptedReply(text="Looked.", held=True, reaction="👍"))
        asked = fake.push_message(chat, "have a look", user_id=chat)
        key = (chat, asked["message_id"])
        await webhook.control.holding.wait()
        await fake.wait_until(lambda: key in fake.state.reactions, timeout_s=WAIT_S)
        assert fake.state.reactions[key] == [{"type": "emoji", "emoji": "👀"}]
        webhook.control.release.set()
        await fake.wait_until(
            lambda: any(m.get("text") == "Looked." for m in fake.bot_messages(chat)),
            timeout_s=WAIT_S,
        )
        # The working reaction went, and the agent's own took its place.
        await fake.wait_until(
            lambda: fake.state.reactions.get(key) == [{"type": "emoji", "emoji": "👍"}],
            timeout_s=WAIT_S,
        )
        reactions = [r.params.get("reaction") for r in fake.calls("setMessageReaction")]
        assert reactions == [
            [{"type": "emoji", "emoji": "👀"}],
            [],
            [{"type": "emoji", "emoji": "👍"}],
        ]
