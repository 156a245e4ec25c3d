"""`probe()` (what `doctor` runs): GET /users/@me against the fake Discord."""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.errors import AuthError
from tests.channels.discord.conftest import make_channel
from tests.fakes.discord_server import FakeDiscord


async def test_probe_names_the_bot_without_opening_the_gateway(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    channel = make_channel(fake_discord, tmp_path)
    who = await channel.probe()
    bot = fake_discord.bot
    assert who == f"@{bot.username} (id {bot.id})"
    assert [(r.method, r.path) for r in fake_discord.requests] == [("GET", "/users/@me")]


async def test_a_token_discord_refuses_is_an_auth_error(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    channel = make_channel(fake_discord, tmp_path, token="not-the-token")
    with pytest.raises(AuthError) as raised:
        await channel.probe()
    assert "not-the-token" not in str(raised.value)
    assert "developer portal" in raised.value.suggestion
