"""QQ message events (`op 0` dispatches) as the gateway's inbound messages.

`C2C_MESSAGE_CREATE` is a user writing to the bot; `GROUP_AT_MESSAGE_CREATE` a group member
mentioning it. The chat id keeps which one it was (`c2c:<user_openid>`, `group:<group_openid>`),
so a reply after a restart still goes to the right API (octos lost that on restart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bus import InboundMessage
from channels.qq.passive import ChatKind
from channels.qq.token import CHANNEL

C2C_MESSAGE = "C2C_MESSAGE_CREATE"
GROUP_MESSAGE = "GROUP_AT_MESSAGE_CREATE"
MESSAGE_EVENTS = frozenset({C2C_MESSAGE, GROUP_MESSAGE})


class MalformedEvent(ValueError):
    """An event of a known type without the fields it must have."""


@dataclass(frozen=True, slots=True)
class QQMessage:
    """A message event: its ids (dedup, the passive reply window) and, when it has text, the
    message for the gateway."""

    event_id: str
    msg_id: str
    kind: ChatKind
    inbound: InboundMessage | None


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise MalformedEvent(f"the event has no {what}")
    return value


def parse_message(payload: dict[str, Any]) -> QQMessage | None:
    """The message in a dispatch, or None for event types the gateway does not take."""
    if payload.get("t") not in MESSAGE_EVENTS:
        return None
    data = payload.get("d")
    if not isinstance(data, dict):
        raise MalformedEvent("the event has no d object")
    author = data.get("author")
    if not isinstance(author, dict):
        raise MalformedEvent("the event has no author")
    msg_id = _text(data.get("id"), "d.id")
    event_id = payload.get("id") if isinstance(payload.get("id"), str) else msg_id
    if payload["t"] == C2C_MESSAGE:
        sender = _text(author.get("user_openid") or author.get("id"), "author.user_openid")
        kind: ChatKind = "c2c"
        chat_id = f"c2c:{sender}"
    else:
        sender = _text(author.get("member_openid") or author.get("id"), "author.member_openid")
        kind = "group"
        chat_id = f"group:{_text(data.get('group_openid'), 'd.group_openid')}"
    content = data.get("content")
    text = content.strip() if isinstance(content, str) else ""
    inbound = (
        InboundMessage(
            channel=CHANNEL,
            sender_id=sender,
            chat_id=chat_id,
            content=text,
            message_id=msg_id,
            metadata={"chat_type": kind},
        )
        if text
        else None
    )
    return QQMessage(str(event_id), msg_id, kind, inbound)


def target(chat_id: str) -> tuple[ChatKind, str]:
    """The chat kind and openid a chat id names; ValueError for a chat id of another form."""
    kind, _, openid = chat_id.partition(":")
    if kind not in ("c2c", "group") or not openid:
        raise ValueError(f"not a QQ chat id: {chat_id!r} (expected c2c:<openid> or group:<openid>)")
    return ("c2c" if kind == "c2c" else "group"), openid
