"""Telegram in webhook mode: updates arrive at the daemon's own HTTP server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import running_daemon
from tests.e2e.telegram_profiles import PATH, SECRET, post, telegram_profile, update
from tests.fakes.telegram_server import FakeTelegram
from tests.support.attack_corpus import REFUSED

pytestmark = pytest.mark.slow

ALICE = 4201
CHAT = ALICE  # a private chat has the user's id


def from_alice(update_id: int, text: str) -> dict[str, Any]:
    return update(update_id, text, user_id=ALICE, name="Alice")


async def test_updates_posted_to_the_daemon_are_answered_and_forgeries_refused(
    tmp_path: Path,
) -> None:
    async with (
        FakeTelegram() as fake,
        running_daemon(tmp_path, {"hook": telegram_profile(fake, ALICE)}) as daemon,
    ):
        await fake.wait_for_calls("setWebhook")
        (registered,) = fake.calls("setWebhook")
        assert registered.params["url"] == f"https://bot.example.com{PATH}"
        assert registered.params["secret_token"] == SECRET

        assert await post(daemon, from_alice(1, "forged"), "wrong-secret") in REFUSED
        assert await post(daemon, from_alice(2, "unsigned"), None) in REFUSED
        assert await post(daemon, from_alice(3, "hello by webhook"), SECRET) == 200
        await fake.wait_until(lambda: len(fake.bot_messages(CHAT)) >= 1)
        # The same update delivered again (Telegram retries webhooks) is answered once.
        assert await post(daemon, from_alice(3, "hello by webhook"), SECRET) == 200
        assert await post(daemon, from_alice(4, "second"), SECRET) == 200
        await fake.wait_until(lambda: len(fake.bot_messages(CHAT)) >= 2)
        assert [m["text"] for m in fake.bot_messages(CHAT)] == ["hello by webhook", "second"]
        assert not fake.calls("getUpdates")
        assert await daemon.stop_cleanly() == 0
    assert fake.calls("deleteWebhook")


async def test_not_ready_until_updates_are_taken(tmp_path: Path) -> None:
    # Reading an update needs the bot's identity: updates are taken once getMe has answered,
    # and /readyz says so only from then on, so a load balancer sends none in between.
    async with FakeTelegram() as fake:
        get_me_answers = fake.hold("getMe")
        async with running_daemon(tmp_path, {"hook": telegram_profile(fake, ALICE)}) as daemon:
            await fake.wait_for_calls("getMe")
            status, body = await daemon.get("/readyz")
            assert status == 503, body
            assert await post(daemon, from_alice(1, "too early"), SECRET) == 503
            get_me_answers.set()
            await daemon.wait_log(lambda event: event.get("event") == "telegram.connected")
            status, body = await daemon.get("/readyz")
            assert status == 200, body
            assert await post(daemon, from_alice(1, "too early"), SECRET) == 200
            await fake.wait_until(lambda: len(fake.bot_messages(CHAT)) >= 1)
            assert [m["text"] for m in fake.bot_messages(CHAT)] == ["too early"]
            assert await daemon.stop_cleanly() == 0
