"""The fake Discord's vocabulary: users, files, recorded requests, and Discord's JSON shapes."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

JsonObject = dict[str, Any]

DISCORD_EPOCH_MS = 1_420_070_400_000
MAX_CONTENT_CHARS = 2000


@dataclass(frozen=True)
class FakeUser:
    id: int
    username: str
    bot: bool = False
    global_name: str | None = None

    def payload(self) -> JsonObject:
        return {
            "id": str(self.id),
            "username": self.username,
            "discriminator": "0",
            "global_name": self.global_name,
            "avatar": None,
            "bot": self.bot,
            "public_flags": 0,
        }


@dataclass(frozen=True)
class FakeAttachment:
    """A file attached to a message; the fake serves it from its CDN."""

    filename: str
    data: bytes
    content_type: str = "application/octet-stream"
    #: A voice message's length: Discord then sends `duration_secs` and a `waveform`.
    duration_s: float | None = None
    #: The size Discord states, when a test wants it to differ from the bytes served.
    stated_size: int | None = None
    #: False: the CDN answers 404 for it, as for an expired link.
    served: bool = True


@dataclass(frozen=True)
class RecordedFile:
    field: str
    filename: str
    data: bytes
    content_type: str


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    #: Below the API base, e.g. "/channels/42/messages".
    path: str
    headers: Mapping[str, str]
    json: Any
    files: tuple[RecordedFile, ...]
    status: int
    #: When the fake answered it (`time.monotonic()`), to check the pace of edits.
    at: float = field(default_factory=time.monotonic)

    @property
    def content(self) -> str | None:
        return self.json.get("content") if isinstance(self.json, dict) else None


class Snowflakes:
    """Discord ids: milliseconds since 2015 in the high bits, a counter in the low ones."""

    def __init__(self) -> None:
        self._counter = 0

    def next(self) -> int:
        self._counter += 1
        timestamp_ms = int(time.time() * 1000) - DISCORD_EPOCH_MS
        return (timestamp_ms << 22) | (self._counter & 0x3FFFFF)


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def json_response(
    payload: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    # Exactly `application/json`: discord.py treats `...; charset=utf-8` as plain text.
    return web.Response(
        status=status,
        body=json.dumps(payload).encode(),
        headers={**(headers or {}), "Content-Type": "application/json"},
    )


def unknown(what: str, code: int) -> web.Response:
    return json_response({"message": f"Unknown {what}", "code": code}, 404)


def content_problem(content: str, *, has_other_parts: bool) -> web.Response | None:
    """Discord's 400 for content that is too long, or a message with nothing in it."""
    if len(content) > MAX_CONTENT_CHARS:
        too_long = {
            "code": "BASE_TYPE_MAX_LENGTH",
            "message": f"Must be {MAX_CONTENT_CHARS} or fewer in length.",
        }
        body = {
            "message": "Invalid Form Body",
            "code": 50035,
            "errors": {"content": {"_errors": [too_long]}},
        }
        return json_response(body, 400)
    if not content and not has_other_parts:
        return json_response({"message": "Cannot send an empty message", "code": 50006}, 400)
    return None


def message_payload(
    message_id: int,
    channel_id: int,
    author: FakeUser,
    content: str,
    *,
    guild_id: int | None,
    mentions: Sequence[FakeUser] = (),
    attachments: Sequence[JsonObject] = (),
    embeds: Sequence[JsonObject] = (),
) -> JsonObject:
    message: JsonObject = {
        "id": str(message_id),
        "channel_id": str(channel_id),
        "author": author.payload(),
        "content": content,
        "timestamp": now_iso(),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [user.payload() for user in mentions],
        "mention_roles": [],
        "attachments": list(attachments),
        "embeds": list(embeds),
        "pinned": False,
        "type": 0,
        # IS_VOICE_MESSAGE: a voice message is one attachment with a duration.
        "flags": 1 << 13 if any("duration_secs" in item for item in attachments) else 0,
    }
    if guild_id is not None:
        message["guild_id"] = str(guild_id)
        message["member"] = {"roles": [], "joined_at": now_iso(), "deaf": False, "mute": False}
    return message


def text_channel_payload(guild_id: int, channel_id: int, position: int) -> JsonObject:
    return {
        "id": str(channel_id),
        "type": 0,
        "guild_id": str(guild_id),
        "name": f"channel-{position}",
        "position": position,
        "permission_overwrites": [],
        "nsfw": False,
        "topic": None,
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "parent_id": None,
    }


def dm_channel_payload(channel_id: int, recipient: FakeUser) -> JsonObject:
    return {
        "id": str(channel_id),
        "type": 1,
        "last_message_id": None,
        "recipients": [recipient.payload()],
    }


def guild_payload(
    guild_id: int, name: str, owner_id: int, channels: Sequence[JsonObject]
) -> JsonObject:
    everyone = {
        "id": str(guild_id),
        "name": "@everyone",
        "permissions": "1071698660929",
        "position": 0,
        "color": 0,
        "hoist": False,
        "managed": False,
    }
    return {
        "id": str(guild_id),
        "name": name,
        "icon": None,
        "owner_id": str(owner_id),
        "member_count": 2,
        "large": False,
        "unavailable": False,
        "joined_at": now_iso(),
        "roles": [everyone],
        "channels": list(channels),
        "threads": [],
        "members": [],
        "voice_states": [],
        "presences": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "soundboard_sounds": [],
        "emojis": [],
        "stickers": [],
        "features": [],
    }


class EditBudget:
    """Discord's limit on message edits: at most `edits` per `window_s` in one channel.

    An edit past the budget gets the 429 Discord sends (with `Via`, so discord.py waits the
    `retry_after` and tries again); a client that keeps to the rate never sees one.
    """

    def __init__(self, edits: int, window_s: float) -> None:
        self.edits = edits
        self.window_s = window_s
        self._recent: dict[str, deque[float]] = {}

    def refusal(self, channel_id: str) -> web.Response | None:
        now_s = time.monotonic()
        recent = self._recent.setdefault(channel_id, deque())
        while recent and now_s - recent[0] >= self.window_s:
            recent.popleft()
        if len(recent) < self.edits:
            recent.append(now_s)
            return None
        retry_after_s = round(recent[0] + self.window_s - now_s, 3)
        body = {"message": "You are being rate limited.", "retry_after": retry_after_s}
        headers = {"Retry-After": f"{retry_after_s:g}", "Via": "1.1 google"}
        return json_response({**body, "global": False}, 429, headers)
