"""Feishu event payloads (schema 2.0) and the messages the gateway reads from them.

`im.message.receive_v1` carries `header{event_id, event_type, token}` and
`event{sender{sender_id{open_id}, sender_type}, message{message_id, chat_id, chat_type,
message_type, content, mentions}}`; `content` is itself a JSON string: `{"text"}` for text,
`{"title", "content": [[{"tag", "text"}...]]}` for rich text ("post"). Mentions appear in the
text as keys (`@_user_1`) listed in `mentions` with the mentioned user's ids.

A photo, file, voice note or video carries a key instead of text: `{"image_key"}` (image),
`{"file_key", "file_name"}` (file), `{"file_key", "duration"}` (audio, milliseconds),
`{"file_key", "image_key", "file_name", "duration"}` (media: a video and its cover). The file
is fetched later, only for allowed senders, with the message resource API (`Resource`).

`card.action.trigger` is the tap of a card button: `event{operator{open_id}, action{value},
context{open_message_id, open_chat_id}}`; a button the channel put on a card has the value
`{"data", "text"}` (`bus.CALLBACK` names the data and the card's message).

`im.message.recalled_v1` is a message taken back (by its sender, or a group's owner or
administrator): `event{message_id, chat_id, recall_time, recall_type}`, naming no sender.
Feishu has no event for an edited message: a user's edit reaches no bot.

`im.message.reaction.created_v1` is a reaction added to a message the bot can read:
`event{message_id, reaction_type{emoji_type}, operator_type, user_id{open_id, union_id,
user_id}, app_id, action_time}` (`user_id` for a user, `app_id` for an app). It names neither
the chat nor the message's author: the channel knows them for the messages it sent, or asks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bus import CALLBACK, REACTION, REPLY_TO, InboundMessage, quoted, reaction_note
from channels.media_info import MediaKind
from channels.web.webhook import UnreadableJson, json_payload

CHANNEL = "feishu"
MESSAGE_RECEIVED = "im.message.receive_v1"
CARD_ACTION = "card.action.trigger"
MESSAGE_RECALLED = "im.message.recalled_v1"
REACTION_CREATED = "im.message.reaction.created_v1"


class MalformedEvent(ValueError):
    """An event payload Feishu would not send."""


@dataclass(frozen=True, slots=True)
class EventEnvelope:
    event_id: str
    event_type: str
    token: str
    event: dict[str, Any] = field(repr=False)


def read_envelope(payload: object) -> EventEnvelope:
    if not isinstance(payload, dict):
        raise MalformedEvent("an event is a JSON object")
    header = payload.get("header")
    event = payload.get("event")
    if payload.get("schema") != "2.0" or not isinstance(header, dict):
        raise MalformedEvent("only schema 2.0 events are read")
    event_id = header.get("event_id")
    if not isinstance(event_id, str) or not event_id:
        raise MalformedEvent("header.event_id is missing")
    return EventEnvelope(
        event_id=event_id,
        event_type=str(header.get("event_type", "")),
        token=str(header.get("token", "")),
        event=event if isinstance(event, dict) else {},
    )


@dataclass(frozen=True, slots=True)
class Resource:
    """A file a message carries: `GET /open-apis/im/v1/messages/{message_id}/resources/{key}
    ?type=<resource_type>` downloads it (at most 100 MB; Feishu does not say its size)."""

    key: str
    #: The resource API's `type`: "image" for an image, "file" for files, audio and video.
    resource_type: str
    kind: MediaKind
    name: str | None = None
    duration_s: float | None = None


@dataclass(frozen=True, slots=True)
class Received:
    """A message for the agent, and the file it carries (fetched by the channel)."""

    message: InboundMessage
    resource: Resource | None = None


#: Message type -> (the content's key field, the resource API's type, the kind of file).
_RESOURCE_TYPES: dict[str, tuple[str, str, MediaKind]] = {
    "image": ("image_key", "image", "image"),
    "file": ("file_key", "file", "file"),
    "audio": ("file_key", "file", "audio"),
    "media": ("file_key", "file", "video"),
}


def read_resource(kind: object, content: dict[str, Any]) -> Resource | None:
    """The file of an image, file, audio or media message; None for other types."""
    known = _RESOURCE_TYPES.get(str(kind))
    if known is None:
        return None
    key_field, resource_type, media_kind = known
    key = content.get(key_field)
    if not isinstance(key, str) or not key:
        raise MalformedEvent(f"a {kind} message has no {key_field}")
    name = content.get("file_name")
    duration_ms = content.get("duration")
    return Resource(
        key=key,
        resource_type=resource_type,
        kind=media_kind,
        name=name if isinstance(name, str) and name else None,
        duration_s=duration_ms / 1000 if isinstance(duration_ms, int | float) else None,
    )


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _post_text(content: dict[str, Any]) -> str:
    body = content.get("content")
    if not isinstance(body, list):
        # A post may come keyed by language: {"zh_cn": {"title", "content"}}.
        body = next((v.get("content") for v in content.values() if isinstance(v, dict)), [])
    lines = []
    for line in body if isinstance(body, list) else []:
        parts = (
            [str(p.get("text", "")) for p in line if isinstance(p, dict)]
            if isinstance(line, list)
            else []
        )
        lines.append("".join(parts))
    title = content.get("title")
    return "\n".join([title, *lines] if isinstance(title, str) and title else lines).strip()


def _content(message: dict[str, Any]) -> dict[str, Any]:
    try:
        return _dict(json_payload(str(message.get("content", "{}"))))
    except UnreadableJson as exc:
        raise MalformedEvent("message.content is not JSON") from exc


def message_text(message: dict[str, Any], bot_open_id: str | None) -> tuple[str, bool] | None:
    """The message's text with mention keys resolved, and whether it mentions the bot; None
    for message types the agent cannot read."""
    kind = message.get("message_type")
    content = _content(message)
    if kind == "text":
        text = str(content.get("text", ""))
    elif kind == "post":
        text = _post_text(content)
    else:
        return None
    mentioned_bot = False
    for mention in message.get("mentions") or []:
        mention = _dict(mention)
        key, open_id = str(mention.get("key", "")), _dict(mention.get("id")).get("open_id")
        if not key:
            continue
        if bot_open_id is not None and open_id == bot_open_id:
            mentioned_bot = True
            text = text.replace(key, "")
        else:
            text = text.replace(key, f"@{mention.get('name', '')}")
    return " ".join(text.split(" ")).strip(), mentioned_bot


def read_message(
    envelope: EventEnvelope, bot_open_id: str | None, *, require_mention: bool
) -> Received | None:
    """The gateway's message for a received-message event, and its file; None when it is not
    for the agent (another event, a bot's message, a group message that does not mention the
    bot, a type the agent cannot read)."""
    if envelope.event_type == CARD_ACTION:
        return read_tap(envelope)
    if envelope.event_type != MESSAGE_RECEIVED:
        return None
    sender, message = _dict(envelope.event.get("sender")), _dict(envelope.event.get("message"))
    if sender.get("sender_type", "user") != "user":
        return None
    open_id = _dict(sender.get("sender_id")).get("open_id")
    chat_id, message_id = message.get("chat_id"), message.get("message_id")
    if not all(isinstance(v, str) and v for v in (open_id, chat_id, message_id)):
        raise MalformedEvent("a message needs sender open_id, chat_id and message_id")
    resource = read_resource(message.get("message_type"), _content(message))
    read = ("", False) if resource is not None else message_text(message, bot_open_id)
    if read is None:
        return None
    text, mentioned = read
    chat_type = str(message.get("chat_type", "p2p"))
    if chat_type != "p2p" and require_mention and not mentioned:
        return None
    metadata: dict[str, object] = {"feishu_message_id": message_id, "feishu_chat_type": chat_type}
    parent_id = message.get("parent_id")
    if isinstance(parent_id, str) and parent_id:
        # A reply names the message it answers; its text would cost an API call per message.
        metadata[REPLY_TO] = quoted(parent_id, None, from_bot=False)
    inbound = InboundMessage(
        channel=CHANNEL,
        sender_id=str(open_id),
        chat_id=str(chat_id),
        content=text,
        message_id=envelope.event_id,
        metadata=metadata,
    )
    return Received(inbound, resource)


def read_recall(envelope: EventEnvelope) -> tuple[str, str] | None:
    """(chat id, message id) of a recalled message; None for another event."""
    if envelope.event_type != MESSAGE_RECALLED:
        return None
    chat_id, message_id = envelope.event.get("chat_id"), envelope.event.get("message_id")
    if not isinstance(chat_id, str) or not chat_id or not isinstance(message_id, str):
        raise MalformedEvent("a recall needs chat_id and message_id")
    return chat_id, message_id


@dataclass(frozen=True, slots=True)
class Reaction:
    """A user's reaction to a message, as far as the event tells it."""

    event_id: str
    #: The Feishu id (`om_...`) of the message reacted to.
    message_id: str
    #: Feishu's name of the emoji ("THUMBSUP").
    emoji_type: str
    open_id: str

    def message(self, chat_id: str, emoji: str) -> InboundMessage:
        """The gateway's message for this reaction to a bot message of `chat_id`, `emoji` as
        the agent reads it; its id is the event's, so a redelivered event is one reaction."""
        return InboundMessage(
            channel=CHANNEL,
            sender_id=self.open_id,
            chat_id=chat_id,
            content=reaction_note(emoji, None),
            message_id=f"reaction:{self.event_id}",
            metadata={REACTION: {"emoji": emoji, "message_id": self.message_id}},
        )


def read_reaction(envelope: EventEnvelope) -> Reaction | None:
    """The reaction of a reaction-created event; None for another event, or an app's."""
    if envelope.event_type != REACTION_CREATED:
        return None
    event = envelope.event
    if event.get("operator_type", "user") != "user":
        return None
    message_id = event.get("message_id")
    emoji_type = _dict(event.get("reaction_type")).get("emoji_type")
    open_id = _dict(event.get("user_id")).get("open_id")
    if not all(isinstance(v, str) and v for v in (message_id, emoji_type, open_id)):
        raise MalformedEvent("a reaction needs message_id, reaction_type.emoji_type and open_id")
    return Reaction(envelope.event_id, str(message_id), str(emoji_type), str(open_id))


def read_tap(envelope: EventEnvelope) -> Received | None:
    """The gateway's message for a tap of a card button; None for an action on a card that
    is not one of the channel's buttons."""
    event = envelope.event
    open_id = _dict(event.get("operator")).get("open_id")
    context = _dict(event.get("context"))
    chat_id, held = context.get("open_chat_id"), context.get("open_message_id")
    if not all(isinstance(v, str) and v for v in (open_id, chat_id, held)):
        raise MalformedEvent("a card action needs operator open_id, open_chat_id and message id")
    value = _dict(_dict(event.get("action")).get("value"))
    data, label = value.get("data"), value.get("text")
    if not isinstance(data, str) or not data:
        return None
    inbound = InboundMessage(
        channel=CHANNEL,
        sender_id=str(open_id),
        chat_id=str(chat_id),
        content=label if isinstance(label, str) and label else data,
        message_id=envelope.event_id,
        metadata={CALLBACK: {"data": data, "message_id": held}},
    )
    return Received(inbound)
