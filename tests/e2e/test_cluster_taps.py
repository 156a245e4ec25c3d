"""Buttons in a cluster (two workers, NATS and PostgreSQL, Telegram on the fake): two taps on
one button reach the webhook agent once, the second answered "already answered" from the
cluster's table of used buttons."""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.buttons import BUTTON_ALREADY_USED
from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.telegram_profiles import polling_profile
from tests.e2e.test_buttons_telegram import USER, asked_with_buttons, taps_seen
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow


async def test_two_taps_on_one_button_reach_the_agent_once(
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
        assert taps_seen(webhook) == [{"data": "refund:42:no", "message_id": str(held_id)}]
