"""Failed REST calls surface as the typed errors the manager's retry policy acts on."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus import OutboundMessage
from channels.discord import DiscordChannel
from channels.errors import (
    AuthError,
    ChannelError,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from config import DiscordConfig
from tests.channels.discord.conftest import ALICE, DM_CHANNEL, RunningBot

MESSAGES = rf"/channels/{DM_CHANNEL}/messages"


def text(content: str) -> OutboundMessage:
    return OutboundMessage(channel="discord", chat_id=str(DM_CHANNEL), content=content)


@pytest.fixture
async def chatting(bot: RunningBot) -> RunningBot:
    """A bot with a DM open: Alice wrote first."""
    await bot.fake.push_message(DM_CHANNEL, ALICE, "hi")
    await bot.next_inbound()
    return bot


async def test_a_discord_429_is_waited_out_by_discord_py_and_delivered_once(
    chatting: RunningBot,
) -> None:
    fake = chatting.fake
    fake.rate_limit_next("POST", MESSAGES, retry_after_s=0.05, via=True)

    message_id = await chatting.channel.send_with_id(text("patience"))

    assert [r.status for r in fake.requests_to("POST", MESSAGES)] == [429, 200]
    [sent] = fake.bot_messages(DM_CHANNEL)
    assert sent["id"] == message_id
    assert sent["content"] == "patience"


async def test_a_429_without_via_becomes_rate_limited_with_the_servers_figure(
    chatting: RunningBot,
) -> None:
    chatting.fake.rate_limit_next("POST", MESSAGES, retry_after_s=7.5, via=False)

    with pytest.raises(RateLimited) as raised:
        await chatting.channel.send(text("too fast"))

    assert raised.value.retry_after_s == 7.5
    assert chatting.fake.bot_messages(DM_CHANNEL) == []


async def test_a_503_becomes_a_transient_error(chatting: RunningBot) -> None:
    chatting.fake.fail_next("POST", MESSAGES, 503)

    with pytest.raises(TransientError):
        await chatting.channel.send(text("hello?"))

    assert [r.status for r in chatting.fake.requests_to("POST", MESSAGES)] == [503]


async def test_a_500_is_retried_by_discord_py_and_delivered_once(chatting: RunningBot) -> None:
    chatting.fake.fail_next("PATCH", rf"{MESSAGES}/\d+", 500)
    message_id = await chatting.channel.send_with_id(text("draft"))
    assert message_id is not None

    await chatting.channel.edit_message(str(DM_CHANNEL), message_id, "final")

    edits = chatting.fake.requests_to("PATCH", rf"{MESSAGES}/{message_id}")
    assert [r.status for r in edits] == [500, 200]
    assert [m["content"] for m in chatting.fake.bot_messages(DM_CHANNEL)] == ["final"]


@pytest.mark.parametrize("status", [401, 403])
async def test_refused_credentials_or_permissions_become_auth_errors(
    chatting: RunningBot, status: int
) -> None:
    chatting.fake.fail_next(
        "POST", MESSAGES, status, body={"message": "Missing Access", "code": 50001}
    )

    with pytest.raises(AuthError):
        await chatting.channel.send(text("let me in"))


async def test_content_over_2000_characters_becomes_message_too_long(chatting: RunningBot) -> None:
    with pytest.raises(MessageTooLong):
        await chatting.channel.send(text("x" * 2001))

    [request] = chatting.fake.requests_to("POST", MESSAGES)
    assert request.status == 400


async def test_an_unknown_channel_is_a_plain_channel_error(chatting: RunningBot) -> None:
    unknown = OutboundMessage(channel="discord", chat_id="123456789", content="anyone?")

    with pytest.raises(ChannelError) as raised:
        await chatting.channel.send(unknown)

    assert type(raised.value) is ChannelError
    assert "10003" in str(raised.value)


async def test_a_chat_id_that_is_not_a_snowflake_is_refused_without_a_request(
    chatting: RunningBot,
) -> None:
    before = len(chatting.fake.requests)
    with pytest.raises(ChannelError, match="not a Discord id"):
        await chatting.channel.send(
            OutboundMessage(channel="discord", chat_id="general", content="hi")
        )
    assert len(chatting.fake.requests) == before


async def test_a_missing_media_file_is_a_channel_error(
    chatting: RunningBot, tmp_path: Path
) -> None:
    missing = OutboundMessage(
        channel="discord",
        chat_id=str(DM_CHANNEL),
        content="see attached",
        media=[str(tmp_path / "gone.png")],
    )

    with pytest.raises(ChannelError, match=r"gone\.png"):
        await chatting.channel.send(missing)


async def test_sending_before_start_is_transient(tmp_path: Path) -> None:
    channel = DiscordChannel(DiscordConfig(token="unused"), data_dir=tmp_path)

    with pytest.raises(TransientError):
        await channel.send(text("too early"))
