"""What a received message tells the agent beyond its text: what its files are, who sent it and
where. The one description every agent and channel reads.

`InboundMessage.media` stays a list of paths (the octos-core wire type). What a channel knows
beyond the bytes (a document's own name, its MIME type, a voice note's duration) travels in the
message's metadata under `MEDIA_DETAILS`, keyed by path; `describe` joins both into a
`MediaInfo` (kind, mime, name, size, sha256, duration). A file that was not downloaded (too
large, refused, timed out) is named in the message's text by `not_downloaded`, so the agent
still learns what was sent and why it cannot see it.

Who and where (`sender_of`, `chat_of`) are read from what each channel puts in the message's
metadata, the same way for every channel; what a channel does not know is None.
"""

from __future__ import annotations

import asyncio
import hashlib
import mimetypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog

from bus import AttachmentKind, InboundMessage

log = structlog.get_logger(__name__)

MediaKind = AttachmentKind

#: Metadata key: {path: {"name": ..., "mime": ..., "duration_s": ...}}, what the channel knows.
MEDIA_DETAILS = "media_details"
#: Metadata key: [{"kind", "name", "size", "reason"}], files the channel did not download.
MEDIA_NOT_DOWNLOADED = "media_not_downloaded"

_READ_BLOCK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class MediaInfo:
    """One received file, as an agent is told of it."""

    path: str
    kind: MediaKind
    mime: str
    #: The name the user gave it, or the saved file's name.
    name: str
    size: int
    sha256: str
    #: Seconds of audio or video, when the platform says.
    duration_s: float | None = None


def kind_for(mime: str) -> MediaKind:
    major = mime.partition("/")[0]
    if major == "image":
        return "image"
    if major == "audio":
        return "audio"
    if major == "video":
        return "video"
    return "file"


def mime_for(name: str) -> str:
    """The MIME type a file name suggests (application/octet-stream when none)."""
    guessed, _ = mimetypes.guess_type(name, strict=False)
    if guessed is None and name.lower().endswith((".oga", ".opus")):
        return "audio/ogg"
    return guessed or "application/octet-stream"


def details_of(metadata: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """What the channel recorded about `path` (empty when nothing)."""
    all_details = metadata.get(MEDIA_DETAILS)
    if not isinstance(all_details, Mapping):
        return {}
    found = all_details.get(path)
    return found if isinstance(found, Mapping) else {}


def record_details(metadata: dict[str, Any], path: str, **details: object) -> None:
    """Keep what the channel knows about a saved file (None values are left out)."""
    known = {key: value for key, value in details.items() if value is not None}
    if known:
        metadata.setdefault(MEDIA_DETAILS, {})[path] = known


def describe(path: str, details: Mapping[str, Any] | None = None) -> MediaInfo:
    """Read and hash `path` (blocking: call it off the event loop); raises OSError."""
    details = details or {}
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as file:
        while block := file.read(_READ_BLOCK):
            digest.update(block)
            size += len(block)
    name = details.get("name")
    name = name if isinstance(name, str) and name else Path(path).name
    mime = details.get("mime")
    if not isinstance(mime, str) or "/" not in mime:
        mime = mime_for(name if Path(name).suffix else Path(path).name)
    duration = details.get("duration_s")
    return MediaInfo(
        path=path,
        kind=kind_for(mime),
        mime=mime.partition(";")[0].strip(),
        name=name,
        size=size,
        sha256=digest.hexdigest(),
        duration_s=float(duration) if isinstance(duration, int | float) else None,
    )


async def describe_media(message: InboundMessage) -> list[MediaInfo]:
    """The message's files that can still be read, described off the event loop."""
    described: list[MediaInfo] = []
    for path in message.media:
        try:
            described.append(
                await asyncio.to_thread(describe, path, details_of(message.metadata, path))
            )
        except OSError as error:
            log.warning(
                "media.unreadable",
                channel=message.channel,
                message_id=message.message_id,
                path=path,
                error=str(error),
            )
    return described


def human_size(size: int) -> str:
    """`31 MB`, `180 KB`, `512 bytes`: what a person reads in a placeholder."""
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.0f} MB"
    if size >= 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size} bytes"


def clock(seconds: float) -> str:
    """`0:42`, `12:05`: a duration as people write it."""
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def too_large_reason(max_bytes: int) -> str:
    return f"larger than the {human_size(max_bytes)} limit"


def not_downloaded(
    message: InboundMessage, *, kind: MediaKind, name: str | None, size: int | None, reason: str
) -> str:
    """The placeholder naming a file the channel could not download, for `message`'s text
    (`with_placeholders`), so the agent learns of it; recorded in the metadata and logged with
    the channel and the message id."""
    shown = f"{kind}: {name}" if name else kind
    size_text = f", {human_size(size)}" if size is not None else ""
    message.metadata.setdefault(MEDIA_NOT_DOWNLOADED, []).append(
        {"kind": kind, "name": name, "size": size, "reason": reason}
    )
    log.warning(
        "media.not_downloaded",
        channel=message.channel,
        message_id=message.message_id,
        kind=kind,
        name=name,
        size=size,
        reason=reason,
    )
    return f"[{shown}{size_text}, not downloaded: {reason}]"


def with_placeholders(content: str, placeholders: Sequence[str]) -> str:
    """The text with the placeholders of files not downloaded, one a line, after it."""
    return "\n".join([content, *placeholders] if content else placeholders)


ChatType = Literal["private", "group", "channel"]
ChatKind = Literal["private", "group"]

#: Channels whose every chat is one person talking to the bot.
_ALWAYS_PRIVATE = frozenset({"email", "twilio", "whatsapp", "wecom", "api", "cli"})
#: Chat-type values of the platforms, as they name them.
_CHAT_TYPES: dict[str, ChatType] = {
    "private": "private",
    "p2p": "private",
    "c2c": "private",
    "single": "private",
    "group": "group",
    "supergroup": "group",
    "channel": "channel",
}


@dataclass(frozen=True, slots=True)
class Sender:
    id: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Chat:
    id: str
    type: ChatType | None = None
    title: str | None = None


def sender_of(message: InboundMessage) -> Sender:
    name = message.metadata.get("sender_name")
    return Sender(message.sender_id, name if isinstance(name, str) and name else None)


def chat_of(message: InboundMessage) -> Chat:
    metadata = message.metadata
    title = metadata.get("chat_title")
    return Chat(
        message.chat_id,
        _chat_type(message.channel, message.chat_id, metadata),
        title if isinstance(title, str) and title else None,
    )


def chat_kind(message: InboundMessage) -> ChatKind | None:
    """Whether `message` came from a chat of one person with the bot or of several (a
    broadcast channel counts as a group); None when its channel does not say."""
    kind = _chat_type(message.channel, message.chat_id, message.metadata)
    return "group" if kind == "channel" else kind


def _chat_type(channel: str, chat_id: str, metadata: Mapping[str, Any]) -> ChatType | None:
    if channel in _ALWAYS_PRIVATE:
        return "private"
    if channel == "line":
        # LINE's ids say what they are: U (a user), C (a group), R (a multi-person room).
        return "private" if chat_id.startswith("U") else "group"
    is_dm = metadata.get("is_dm")
    if isinstance(is_dm, bool):
        return "private" if is_dm else "group"
    for key in ("chat_type", "feishu_chat_type"):
        value = metadata.get(key)
        if isinstance(value, str) and value in _CHAT_TYPES:
            return _CHAT_TYPES[value]
    return None
