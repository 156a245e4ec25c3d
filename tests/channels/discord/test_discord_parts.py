"""The parts on their own: endpoint routing, the factory, mention and file-name handling."""

from __future__ import annotations

from pathlib import Path

import discord
import pytest
from discord.gateway import DiscordWebSocket
from discord.http import Route

from channels.discord import DiscordChannel, DiscordEndpoints
from channels.discord.errors import translate_gateway_error
from channels.discord.inbound import reaction_of, strip_mention
from channels.errors import FatalChannelError, TransientError
from channels.media_files import safe_file_name
from channels.registry import ChannelContext, build_channel
from config import DiscordConfig

LOCAL = DiscordEndpoints(
    api_base_url="http://127.0.0.1:9999/api/v10", gateway_url="ws://127.0.0.1:9999/gateway"
)


def test_rest_urls_built_by_discord_py_move_to_the_configured_base() -> None:
    route = Route("POST", "/channels/{channel_id}/messages", channel_id=42)

    assert route.url == "https://discord.com/api/v10/channels/42/messages"
    assert LOCAL.rest_url(route.url) == "http://127.0.0.1:9999/api/v10/channels/42/messages"
    # Absolute URLs that do not start at the API base (CDN files) are left alone.
    cdn = "https://cdn.discordapp.com/attachments/1/2/cat.png"
    assert LOCAL.rest_url(cdn) == cdn


def test_the_first_gateway_connection_goes_to_the_configured_gateway() -> None:
    default = DiscordWebSocket.DEFAULT_GATEWAY.with_query(
        v=10, encoding="json", compress="zlib-stream"
    )

    assert LOCAL.gateway_connect_url(str(default)) == (
        "ws://127.0.0.1:9999/gateway?v=10&encoding=json&compress=zlib-stream"
    )


def test_a_resume_url_handed_out_by_the_server_is_kept() -> None:
    resume = "wss://gateway-us-east1-b.discord.gg/?v=10&encoding=json"

    assert LOCAL.gateway_connect_url(resume) == resume


def test_the_default_endpoints_are_discords_and_change_nothing() -> None:
    endpoints = DiscordEndpoints()
    url = Route("GET", "/users/@me").url

    assert endpoints.rest_url(url) == url
    gateway = "wss://gateway.discord.gg/?v=10"
    assert endpoints.gateway_connect_url(gateway) == gateway


def test_relative_endpoints_are_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        DiscordEndpoints(api_base_url="/api/v10")


def test_create_builds_the_channel_from_its_profile_config(tmp_path: Path) -> None:
    config = DiscordConfig.model_validate(
        {
            "type": "discord",
            "token": "secret-token",
            "allow": ["111", 222, "@carol"],
            "require_mention": False,
            "api_base_url": "http://127.0.0.1:1/api/v10",
            "gateway_url": "ws://127.0.0.1:1/gateway",
        }
    )

    channel = build_channel(config, ChannelContext(profile="p1", data_dir=tmp_path))

    # The registry is the allow list's one owner: it applies `allow` to what `create` built.
    assert isinstance(channel, DiscordChannel)
    assert channel.name == "discord"
    assert channel.is_allowed("222|bob")
    assert channel.is_allowed("999|carol")
    assert not channel.is_allowed("999|mallory")


def test_the_registry_finds_the_discord_factory(tmp_path: Path) -> None:
    config = DiscordConfig.model_validate({"type": "discord", "token": "t", "allow": ["*"]})

    channel = build_channel(config, ChannelContext(profile="p1", data_dir=tmp_path))

    assert isinstance(channel, DiscordChannel)
    assert channel.is_allowed("anyone")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<@42> hello", "hello"),
        ("hello <@!42>", "hello"),
        ("a <@42> b", "a b"),
        ("<@42>", ""),
        ("<@421> is someone else", "<@421> is someone else"),
    ],
)
def test_only_the_bots_own_mention_is_stripped(content: str, expected: str) -> None:
    assert strip_mention(content, 42) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("photo.png", "photo.png"),
        ("../../etc/passwd", "_.._etc_passwd"),
        ("my report (final).pdf", "my_report_final_.pdf"),
        ("...", "file"),
        ("图片.jpg", "_.jpg"),
    ],
)
def test_attachment_names_cannot_leave_the_media_directory(name: str, expected: str) -> None:
    safe = safe_file_name(name)

    assert safe == expected
    assert "/" not in safe
    assert not safe.startswith(".")


def test_gateway_failures_are_fatal_only_when_retrying_cannot_help() -> None:
    assert isinstance(translate_gateway_error(discord.LoginFailure("bad")), FatalChannelError)
    assert isinstance(
        translate_gateway_error(discord.PrivilegedIntentsRequired(None)), FatalChannelError
    )
    assert isinstance(translate_gateway_error(discord.ClientException("odd")), TransientError)


BOT_ID = 900


def reaction_event(
    emoji: discord.PartialEmoji, *, author: int, user: int = 42
) -> discord.RawReactionActionEvent:
    data = {
        "user_id": str(user),
        "channel_id": "555",
        "message_id": "777",
        "message_author_id": str(author),
        "burst": False,
        "type": 0,
    }
    return discord.RawReactionActionEvent(data, emoji, "REACTION_ADD")  # type: ignore[arg-type]


def test_a_reaction_to_the_bots_message_reads_as_a_reaction() -> None:
    thumbs = reaction_of(reaction_event(discord.PartialEmoji(name="👍"), author=BOT_ID), BOT_ID)
    assert thumbs is not None
    assert (thumbs.chat_id, thumbs.sender_id) == ("555", "42")
    assert thumbs.content == "[reaction 👍 to a message]"
    assert thumbs.metadata["reaction"] == {"emoji": "👍", "message_id": "777"}
    # No event id: one reaction per user, message and emoji.
    assert thumbs.message_id == "reaction:777:42:👍"
    custom = discord.PartialEmoji(name="party", id=123456)
    party = reaction_of(reaction_event(custom, author=BOT_ID), BOT_ID)
    assert party is not None
    assert party.content == "[reaction :party: to a message]"


def test_a_reaction_to_someone_elses_message_or_by_the_bot_is_not_passed_on() -> None:
    thumbs = discord.PartialEmoji(name="👍")
    assert reaction_of(reaction_event(thumbs, author=43), BOT_ID) is None
    assert reaction_of(reaction_event(thumbs, author=BOT_ID, user=BOT_ID), BOT_ID) is None
