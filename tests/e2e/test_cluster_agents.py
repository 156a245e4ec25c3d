"""Several agents in a cluster: the worker routes with the same code as one process (a `/code`
prefix to the second agent, without the prefix), and a chat's `/agent` choice is kept in
PostgreSQL, so the worker that answers next follows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.telegram_profiles import polling_profile
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

USER = 5151
CHAT, OTHER_CHAT = 7201, 7202


async def test_a_worker_routes_a_prefix_and_follows_a_chats_choice(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    async with FakeTelegram() as fake, FakeWebhook() as webhook, processes() as running:
        text = polling_profile(fake, USER, "{type: echo}") + (
            f'agents:\n  coder: {{type: webhook, url: "{webhook.url}"}}\n'
            "routes:\n  - match: {prefix: /code}\n    agent: coder\nagent_switch: true\n"
        )
        config = cluster_config(tmp_path, {profile: text}, prefix=nats_prefix, dsn=postgres_dsn)
        running.append(await start_role(config, "worker"))
        running.append(await start_role(config, "ingress"))
        webhook.script(ScriptedReply(text="coded"), ScriptedReply(text="chosen"))

        def replies(chat: int, count: int) -> bool:
            return len(fake.bot_messages(chat)) == count

        fake.push_message(CHAT, "/code fix it", user_id=USER)
        await fake.wait_until(lambda: replies(CHAT, 1), timeout_s=30)
        fake.push_message(CHAT, "/agent coder", user_id=USER)
        await fake.wait_until(lambda: replies(CHAT, 2), timeout_s=30)
        fake.push_message(CHAT, "plain words", user_id=USER)
        await fake.wait_until(lambda: replies(CHAT, 3), timeout_s=30)
        fake.push_message(OTHER_CHAT, "echo me", user_id=USER)
        await fake.wait_until(lambda: replies(OTHER_CHAT, 1), timeout_s=30)

        texts = [message["text"] for message in fake.bot_messages(CHAT)]
        assert texts == ["coded", "This chat now talks to 'coder'.", "chosen"]
        assert fake.bot_messages(OTHER_CHAT)[0]["text"] == "echo me"
        assert [post.json["message"]["content"] for post in webhook.requests] == [
            "fix it",
            "plain words",
        ]
