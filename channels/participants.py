"""Who sent a message and where: read from what each channel puts in the message's metadata.

Agents are told the sender (`id`, display `name`) and the chat (`id`, `type`, `title`) of every
message. Channels name these facts in their own metadata keys (Telegram's `chat_type`, Slack's
and Discord's `is_dm`, Feishu's `feishu_chat_type`...); this module is the one place that reads
them, so a new channel adds its keys here. What a channel does not know is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from bus import InboundMessage

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
