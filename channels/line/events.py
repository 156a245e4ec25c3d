"""LINE webhook events, as the channel needs them: who wrote what where, and how to answer.

The request body is `{"destination": bot user id, "events": [...]}`; each event is parsed with
line-bot-sdk's own models (`Event.from_dict`). Only message events in `active` mode carry
something for the agent (`standby` means another channel of a module owns the chat). Text is
taken as it is; images, video, audio and files become media, downloaded later and only for
allowed senders; a sticker or location becomes a short description. A `postback` event is the
tap of a quick reply button (its `data`, as `channels.line.channel` wrote it).

A `messageEdited` event is a user's edit of a text message, with the message's id and its new
text; LINE sends it only in group chats (users cannot edit in a one-on-one chat with an
official account), and several edits of one message may arrive out of order (the largest
`timestamp` is the latest). An `unsend` event names the message a user took back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import structlog
from linebot.v3.webhooks import (
    AudioMessageContent,
    Event,
    FileMessageContent,
    GroupSource,
    ImageMessageContent,
    LocationMessageContent,
    MessageEditedEvent,
    MessageEvent,
    PostbackEvent,
    RoomSource,
    StickerMessageContent,
    TextMessageContent,
    UnsendEvent,
    UserSource,
    VideoMessageContent,
)

from channels.web.webhook import UnreadableJson, json_payload

log = structlog.get_logger(__name__)

#: Message kinds whose content is a file on LINE's data API.
_MEDIA_KINDS: dict[type[object], str] = {
    ImageMessageContent: "image",
    VideoMessageContent: "video",
    AudioMessageContent: "audio",
    FileMessageContent: "file",
}


class MalformedBody(ValueError):
    """A signed body that is not the `{"events": [...]}` object LINE sends."""


@dataclass(frozen=True, slots=True)
class LinePost:
    """One message a user sent the bot."""

    event_id: str
    message_id: str
    sender_id: str
    chat_id: str
    text: str
    reply_token: str | None
    timestamp_ms: int
    is_redelivery: bool
    #: "image", "video", "audio" or "file" when the message is a file to download.
    media_kind: str | None = None
    file_name: str | None = None
    #: What LINE states of a file (`fileSize`) and of audio or video (`duration`, in ms).
    file_size: int | None = None
    duration_s: float | None = None
    #: The message this one quotes (LINE's `quotedMessageId`; its text is not sent).
    quoted_message_id: str | None = None
    #: A postback event's `data`: the tap of a quick reply button.
    postback_data: str | None = None
    #: A `messageEdited` event: `message_id` and `text` are the edited message's, new text.
    edited: bool = False
    #: An `unsend` event: `message_id` names the message taken back.
    unsent: bool = False

    @property
    def sent_at(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp_ms / 1000, UTC)


def raw_events(body: bytes) -> list[dict[str, object]]:
    """The events of a signed body; `MalformedBody` when it is not LINE's shape."""
    try:
        parsed = json_payload(body)
    except UnreadableJson as error:
        raise MalformedBody(f"body is not JSON: {error}") from error
    events = parsed.get("events") if isinstance(parsed, dict) else None
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise MalformedBody('body must be an object with an "events" list of objects')
    return events


def event_timestamp_ms(raw: dict[str, object]) -> int | None:
    stamp = raw.get("timestamp")
    return stamp if isinstance(stamp, int) and not isinstance(stamp, bool) else None


def parse_post(raw: dict[str, object]) -> LinePost | None:
    """The message in one event, or None for events that carry none (follow, join, ...)."""
    try:
        event = Event.from_dict(raw)
    except (ValueError, TypeError) as error:
        log.warning("line.malformed_event_skipped", error=str(error)[:300], type=raw.get("type"))
        return None
    if isinstance(event, PostbackEvent) and event.mode == "active":
        return _postback(event)
    if isinstance(event, UnsendEvent) and event.mode == "active":
        return _unsend(event)
    if not isinstance(event, MessageEvent | MessageEditedEvent) or event.mode != "active":
        log.debug("line.event_ignored", type=raw.get("type"), mode=raw.get("mode"))
        return None
    where = _chat_of(event)
    if where is None:
        log.info("line.message_without_sender_skipped", event_id=event.webhook_event_id)
        return None
    sender_id, chat_id = where
    content = event.message
    kind = next((k for cls, k in _MEDIA_KINDS.items() if isinstance(content, cls)), None)
    return LinePost(
        event_id=event.webhook_event_id,
        message_id=str(content.id),
        sender_id=sender_id,
        chat_id=chat_id,
        text=_text_of(content),
        reply_token=event.reply_token,
        timestamp_ms=event.timestamp,
        is_redelivery=bool(event.delivery_context and event.delivery_context.is_redelivery),
        media_kind=kind,
        file_name=content.file_name if isinstance(content, FileMessageContent) else None,
        file_size=content.file_size if isinstance(content, FileMessageContent) else None,
        duration_s=_duration_s(content),
        quoted_message_id=_optional_str(getattr(content, "quoted_message_id", None)),
        edited=isinstance(event, MessageEditedEvent),
    )


def _postback(event: PostbackEvent) -> LinePost | None:
    where = _chat_of(event)
    if where is None or event.postback is None:
        log.info("line.postback_without_sender_skipped", event_id=event.webhook_event_id)
        return None
    sender_id, chat_id = where
    return LinePost(
        event_id=event.webhook_event_id,
        # A postback is no message of its own: the event names it.
        message_id=event.webhook_event_id,
        sender_id=sender_id,
        chat_id=chat_id,
        text="",
        reply_token=event.reply_token,
        timestamp_ms=event.timestamp,
        is_redelivery=bool(event.delivery_context and event.delivery_context.is_redelivery),
        postback_data=str(event.postback.data),
    )


def _unsend(event: UnsendEvent) -> LinePost | None:
    where = _chat_of(event)
    if where is None:
        log.info("line.unsend_without_sender_skipped", event_id=event.webhook_event_id)
        return None
    sender_id, chat_id = where
    return LinePost(
        event_id=event.webhook_event_id,
        message_id=str(event.unsend.message_id),
        sender_id=sender_id,
        chat_id=chat_id,
        text="",
        reply_token=None,
        timestamp_ms=event.timestamp,
        is_redelivery=bool(event.delivery_context and event.delivery_context.is_redelivery),
        unsent=True,
    )


def _optional_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _duration_s(content: object) -> float | None:
    duration_ms = getattr(content, "duration", None)
    return duration_ms / 1000 if isinstance(duration_ms, int) else None


def _chat_of(
    event: MessageEvent | MessageEditedEvent | PostbackEvent | UnsendEvent,
) -> tuple[str, str] | None:
    """(sender, chat): a user's own chat is their user id; groups and rooms have their own."""
    source = event.source
    if isinstance(source, UserSource) and source.user_id:
        return source.user_id, source.user_id
    if isinstance(source, GroupSource) and source.user_id:
        return source.user_id, source.group_id
    if isinstance(source, RoomSource) and source.user_id:
        return source.user_id, source.room_id
    return None


def _text_of(content: object) -> str:
    if isinstance(content, TextMessageContent):
        return str(content.text)
    if isinstance(content, StickerMessageContent):
        return f"[sticker {content.package_id}/{content.sticker_id}]"
    if isinstance(content, LocationMessageContent):
        label = content.title or content.address or ""
        return f"[location {content.latitude},{content.longitude}] {label}".strip()
    return ""
