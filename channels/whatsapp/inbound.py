"""What a WhatsApp `messages` webhook says.

One POST may carry several entries and changes; each change's `value` has `metadata`
(`phone_number_id`: which business number it is for), `contacts` (profile names), `messages`
(what users sent) and/or `statuses` (what became of the bot's own messages: sent, delivered,
read, failed). Statuses are not messages and are never answered.

Message types: `text` (`text.body`), media (`image`, `video`, `audio`, `document`, `sticker`,
each with an `id` to download and maybe a `caption`), `interactive` (a button or list reply),
`button` (a template's quick reply), `location`, `reaction`; anything else is kept as its type.
An `interactive` reply is the tap of a button the bot sent: its `id` is the button's data and
its `context.id` the bot message that held it (`bus.CALLBACK`). A `reaction` is a user's emoji
on one of the bot's messages (WhatsApp sends no other: `reaction.message_id` names it), a
message of the chat with `bus.REACTION`; one taken back comes without its `emoji` and carries
no `bus.REACTION` (`WhatsAppMessage.removed_reaction`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bus import CALLBACK, REACTION, REPLY_TO, InboundMessage, quoted, reaction_note
from channels.whatsapp.graph import CHANNEL

MEDIA_KINDS = frozenset({"image", "video", "audio", "document", "sticker"})


class MalformedWebhook(ValueError):
    """A signed body that is not a WhatsApp webhook payload."""


@dataclass(frozen=True, slots=True)
class MediaRef:
    media_id: str
    mime_type: str
    file_name: str | None


@dataclass(frozen=True, slots=True)
class WhatsAppMessage:
    """A user's message for the gateway (its wamid the `message_id`, the sender the chat), with
    what deciding whether to take it and fetching its file need."""

    message: InboundMessage
    wamid: str
    kind: str
    #: When it was sent, in seconds since the epoch; 0 when WhatsApp did not say.
    timestamp: int
    media: MediaRef | None

    @property
    def removed_reaction(self) -> bool:
        """A reaction the user took back (or one naming no message): nothing to pass on."""
        return self.kind == "reaction" and REACTION not in self.message.metadata


@dataclass(frozen=True, slots=True)
class DeliveryStatus:
    wamid: str
    status: str
    recipient: str
    error_codes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Notification:
    messages: tuple[WhatsAppMessage, ...]
    statuses: tuple[DeliveryStatus, ...]
    #: Changes for other business numbers of the same app (not ours to answer).
    foreign: int


def _dicts(value: object) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _text_of(kind: str, message: Mapping[str, Any]) -> str:
    body = message.get(kind)
    part: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
    if kind == "text":
        return str(part.get("body", ""))
    if kind in MEDIA_KINDS:
        return str(part.get("caption", ""))
    if kind == "interactive":
        for reply in ("button_reply", "list_reply"):
            chosen = part.get(reply)
            if isinstance(chosen, Mapping):
                return str(chosen.get("title", ""))
    if kind == "button":
        return str(part.get("text", ""))
    if kind == "reaction":
        reaction = _reaction(message)
        # WhatsApp does not send the text of the message reacted to.
        return reaction_note(reaction["emoji"], None) if reaction else ""
    if kind == "location":
        where = ", ".join(str(part[k]) for k in ("name", "address") if part.get(k))
        coordinates = f"{part.get('latitude')},{part.get('longitude')}"
        return f"[location {coordinates}{' ' + where if where else ''}]"
    return ""


def _reaction(message: Mapping[str, Any]) -> dict[str, str] | None:
    """`{"emoji", "message_id"}` of a `reaction` message; None for one taken back (WhatsApp
    leaves its `emoji` out) or naming no message."""
    body = message.get("reaction")
    if not isinstance(body, Mapping):
        return None
    emoji, reacted = body.get("emoji"), body.get("message_id")
    if not isinstance(emoji, str) or not emoji or not isinstance(reacted, str) or not reacted:
        return None
    return {"emoji": emoji, "message_id": reacted}


def _tapped_id(message: Mapping[str, Any]) -> str | None:
    """The `id` of the reply button or list row an `interactive` message chose."""
    body = message.get("interactive")
    if not isinstance(body, Mapping):
        return None
    for reply in ("button_reply", "list_reply"):
        chosen = body.get(reply)
        if isinstance(chosen, Mapping) and chosen.get("id"):
            return str(chosen["id"])
    return None


def _media_of(kind: str, message: Mapping[str, Any]) -> MediaRef | None:
    part = message.get(kind)
    if kind not in MEDIA_KINDS or not isinstance(part, Mapping) or not part.get("id"):
        return None
    name = part.get("filename")
    return MediaRef(str(part["id"]), str(part.get("mime_type", "")), str(name) if name else None)


def _message(raw: Mapping[str, Any], names: Mapping[str, str]) -> WhatsAppMessage | None:
    wamid, sender, kind = raw.get("id"), raw.get("from"), str(raw.get("type", ""))
    if not isinstance(wamid, str) or not isinstance(sender, str) or not wamid or not sender:
        return None
    try:
        timestamp = int(raw.get("timestamp", 0))
    except (TypeError, ValueError):
        timestamp = 0
    message = InboundMessage(
        channel=CHANNEL,
        sender_id=sender,
        chat_id=sender,
        content=_text_of(kind, raw),
        timestamp=datetime.fromtimestamp(timestamp, UTC) if timestamp else datetime.now(UTC),
        metadata=_metadata(kind, raw, names.get(sender)),
        message_id=wamid,
    )
    return WhatsAppMessage(message, wamid, kind, timestamp, _media_of(kind, raw))


def _metadata(kind: str, raw: Mapping[str, Any], profile_name: str | None) -> dict[str, object]:
    metadata: dict[str, object] = {"type": kind}
    if profile_name:
        metadata["profile_name"] = profile_name
    context = raw.get("context")
    context_id = context.get("id") if isinstance(context, Mapping) else None
    tapped = _tapped_id(raw) if kind == "interactive" else None
    reaction = _reaction(raw) if kind == "reaction" else None
    if reaction is not None:
        metadata[REACTION] = reaction
    if tapped is not None:
        metadata[CALLBACK] = {"data": tapped, "message_id": str(context_id) if context_id else None}
    elif context_id:
        # The quoted message is named only: its text is not sent.
        metadata[REPLY_TO] = quoted(str(context_id), None, from_bot=False)
    return metadata


def _status(raw: Mapping[str, Any]) -> DeliveryStatus:
    codes = tuple(
        error["code"] for error in _dicts(raw.get("errors")) if isinstance(error.get("code"), int)
    )
    return DeliveryStatus(
        str(raw.get("id", "")), str(raw.get("status", "")), str(raw.get("recipient_id", "")), codes
    )


def parse_notification(payload: object, phone_number_id: str) -> Notification:
    """Messages and statuses for our number, in the order WhatsApp sent them."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("entry"), list):
        raise MalformedWebhook("a webhook payload is an object with an 'entry' list")
    messages: list[WhatsAppMessage] = []
    statuses: list[DeliveryStatus] = []
    foreign = 0
    values: Sequence[Mapping[str, Any]] = [
        change["value"]
        for entry in _dicts(payload["entry"])
        for change in _dicts(entry.get("changes"))
        if change.get("field", "messages") == "messages"
        and isinstance(change.get("value"), Mapping)
    ]
    for value in values:
        metadata = value.get("metadata")
        number = metadata.get("phone_number_id") if isinstance(metadata, Mapping) else None
        if str(number) != phone_number_id:
            foreign += 1
            continue
        names = {
            str(contact.get("wa_id")): str(profile.get("name"))
            for contact in _dicts(value.get("contacts"))
            if isinstance(profile := contact.get("profile"), Mapping) and profile.get("name")
        }
        messages.extend(
            parsed for raw in _dicts(value.get("messages")) if (parsed := _message(raw, names))
        )
        statuses.extend(_status(raw) for raw in _dicts(value.get("statuses")))
    return Notification(tuple(messages), tuple(statuses), foreign)
