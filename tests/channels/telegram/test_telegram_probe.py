"""`probe()` (what `doctor` runs): getMe against the fake Bot API, good and bad tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.errors import AuthError, TransientError
from channels.telegram import TelegramChannel
from tests.channels.telegram.conftest import ChannelFactory, config_for
from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import free_port


async def test_probe_names_the_bot_and_receives_nothing(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    try:
        who = await channel.probe()
    finally:
        await channel.stop()
    assert who is not None
    assert who.startswith("@")
    assert "(id " in who
    assert [call.method for call in fake.requests] == ["getMe"]


async def test_a_token_telegram_refuses_is_an_auth_error_that_quotes_no_token(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    wrong = "987654321:WRONG-token_abcdefghijklmnopqrstuvw"
    channel = TelegramChannel(config_for(fake, token=wrong), data_dir=tmp_path)
    try:
        with pytest.raises(AuthError) as raised:
            await channel.probe()
    finally:
        await channel.stop()
    assert "WRONG-token" not in str(raised.value)
    assert "@BotFather" in raised.value.suggestion


async def test_an_unreachable_server_is_transient(fake: FakeTelegram, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/bot"
    channel = TelegramChannel(config_for(fake, base_url=dead), data_dir=tmp_path)
    try:
        with pytest.raises(TransientError):
            await channel.probe()
    finally:
        await channel.stop()
