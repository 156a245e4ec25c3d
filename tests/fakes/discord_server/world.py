"""What the fake Discord knows: its bot, servers, channels, messages and hosted files."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.discord_server.models import (
    FakeAttachment,
    FakeUser,
    JsonObject,
    Snowflakes,
    dm_channel_payload,
    guild_payload,
    message_payload,
    text_channel_payload,
)


@dataclass
class Guild:
    id: int
    name: str
    channel_ids: list[int]


@dataclass
class World:
    token: str
    bot: FakeUser
    #: The fake's origin ("http://127.0.0.1:PORT"), for the URLs of hosted attachments.
    origin: str = ""
    ids: Snowflakes = field(default_factory=Snowflakes)
    messages: dict[int, JsonObject] = field(default_factory=dict)
    channels: dict[int, JsonObject] = field(default_factory=dict)
    guilds: dict[int, Guild] = field(default_factory=dict)
    cdn: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    #: The CDN keys fetched, in order.
    cdn_fetched: list[str] = field(default_factory=list)
    #: The interactions sent to the bot: id -> token.
    interactions: dict[str, str] = field(default_factory=dict)
    #: id -> the bot's answer to the interaction (`POST .../callback`), once it came.
    interaction_answers: dict[str, JsonObject] = field(default_factory=dict)

    @property
    def owner_id(self) -> int:
        return self.bot.id + 1

    def bot_payload(self) -> JsonObject:
        return {**self.bot.payload(), "verified": True, "mfa_enabled": False, "flags": 0}

    def add_guild(self, guild_id: int, channel_ids: Sequence[int], name: str) -> Guild:
        guild = Guild(guild_id, name, list(channel_ids))
        self.guilds[guild_id] = guild
        for position, channel_id in enumerate(guild.channel_ids):
            self.channels[channel_id] = text_channel_payload(guild_id, channel_id, position)
        return guild

    def guild_create(self, guild: Guild) -> JsonObject:
        channels = [self.channels[channel_id] for channel_id in guild.channel_ids]
        return guild_payload(guild.id, guild.name, self.owner_id, channels)

    def add_dm_channel(self, channel_id: int, recipient: FakeUser) -> JsonObject:
        channel = dm_channel_payload(channel_id, recipient)
        self.channels[channel_id] = channel
        return channel

    def dm_channel_with(self, user_id: int) -> JsonObject | None:
        for channel in self.channels.values():
            if channel["type"] == 1 and channel["recipients"][0]["id"] == str(user_id):
                return channel
        return None

    def host(self, channel_id: int, attachment: FakeAttachment) -> JsonObject:
        """Serve a file from the fake CDN; the attachment object that points at it."""
        attachment_id = self.ids.next()
        # Like Discord's CDN: the URL carries a tamed name; `filename` keeps the original.
        url_name = re.sub(r"[^A-Za-z0-9._-]", "_", attachment.filename)
        key = f"{channel_id}/{attachment_id}/{url_name}"
        if attachment.served:
            self.cdn[key] = (attachment.data, attachment.content_type)
        url = f"{self.origin}/attachments/{key}"
        hosted: JsonObject = {
            "id": str(attachment_id),
            "filename": attachment.filename,
            "size": len(attachment.data)
            if attachment.stated_size is None
            else attachment.stated_size,
            "url": url,
            "proxy_url": url,
            "content_type": attachment.content_type,
        }
        if attachment.duration_s is not None:
            hosted["duration_secs"] = attachment.duration_s
            hosted["waveform"] = "AAAA"
        return hosted

    def create_message(
        self,
        channel_id: int,
        author: FakeUser,
        content: str,
        *,
        mentions: Sequence[FakeUser] = (),
        attachments: Sequence[FakeAttachment] = (),
        embeds: Sequence[JsonObject] = (),
        reference: JsonObject | None = None,
    ) -> JsonObject:
        channel = self.channels[channel_id]
        guild_id = channel.get("guild_id")
        message = message_payload(
            self.ids.next(),
            channel_id,
            author,
            content,
            guild_id=None if guild_id is None else int(guild_id),
            mentions=mentions,
            attachments=[self.host(channel_id, a) for a in attachments],
            embeds=embeds,
        )
        if reference is not None:
            message["type"] = 19  # a reply
            message["message_reference"] = {
                "type": 0,
                "message_id": str(reference["message_id"]),
                "channel_id": str(reference.get("channel_id", channel_id)),
            }
            message["referenced_message"] = self.messages.get(int(reference["message_id"]))
        self.messages[int(message["id"])] = message
        return message

    def message_in(self, channel_id: str, message_id: str) -> JsonObject | None:
        message = self.messages.get(int(message_id))
        return message if message is not None and message["channel_id"] == channel_id else None

    def bot_messages(self, channel_id: int) -> list[JsonObject]:
        return [
            m
            for m in self.messages.values()
            if m["channel_id"] == str(channel_id) and m["author"]["id"] == str(self.bot.id)
        ]

    def application(self) -> dict[str, Any]:
        return {
            "id": str(self.bot.id),
            "name": self.bot.username,
            "icon": None,
            "description": "",
            "bot_public": True,
            "bot_require_code_grant": False,
            "verify_key": "0" * 64,
            "flags": 0,
            "owner": FakeUser(id=self.owner_id, username="owner").payload(),
            "bot": self.bot.payload(),
        }
