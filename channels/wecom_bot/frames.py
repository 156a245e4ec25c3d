"""The WeCom AI bot's websocket frames, as the long-connection protocol defines them.

Every frame is JSON `{cmd, headers: {req_id}, body}`. The server answers each frame the client
sends (`aibot_subscribe`, `ping`, `aibot_respond_msg`, `aibot_send_msg`) with an acknowledgement
`{headers: {req_id}, errcode, errmsg}` carrying the same `req_id`. It pushes user messages as
`aibot_msg_callback` and events (enter_chat, disconnected_event...) as `aibot_event_callback`;
a reply to a message reuses that callback's `req_id`.

A reply's buttons go as a button interaction template card (`button_card`): as the reply to a
callback or of the bot's own accord. A tap comes back as an `aibot_event_callback` whose event is
`template_card_event` (`parse_card_tap`), and the bot answers it, within five seconds, by
replacing the card (`card_update`, `aibot_respond_update_msg` on the event's `req_id`): the only
reply such a `req_id` takes.

A callback's image, file or video (alone, or among the items of a `mixed` message) is
`{"url", "aeskey"}`: the URL serves the file encrypted with AES-256-CBC under that message's own
key (base64 `aeskey`, the IV its first 16 bytes, PKCS#7 padded to 32-byte blocks), which
`decrypt_media` undoes. A voice message arrives already recognised by WeCom, as text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import structlog
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from bus import ButtonRows
from channels.buttons import packed_tap, unpacked_tap
from channels.markup.plain import render_phone_text
from channels.media_info import MediaKind
from channels.web.webhook import UnreadableJson, json_payload

log = structlog.get_logger(__name__)

SUBSCRIBE = "aibot_subscribe"
PING = "ping"
RESPOND = "aibot_respond_msg"
UPDATE_CARD = "aibot_respond_update_msg"
SEND = "aibot_send_msg"
MESSAGE_CALLBACK = "aibot_msg_callback"
EVENT_CALLBACK = "aibot_event_callback"
#: The event telling this connection another one took over the bot (one connection per bot).
DISCONNECTED_EVENT = "disconnected_event"
#: The event of a tap on a template card's button.
TEMPLATE_CARD_EVENT = "template_card_event"

ChatType = Literal["single", "group"]


class MalformedFrame(ValueError):
    """A frame that is not the protocol's JSON shape."""


def new_req_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame received from the server."""

    cmd: str
    req_id: str
    body: dict[str, Any]
    errcode: int | None
    errmsg: str

    @property
    def is_ack(self) -> bool:
        return not self.cmd and self.errcode is not None


def parse_frame(raw: str) -> Frame:
    try:
        data = json_payload(raw)
    except UnreadableJson as exc:
        raise MalformedFrame(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise MalformedFrame("a frame must be a JSON object")
    headers = data.get("headers")
    req_id = headers.get("req_id") if isinstance(headers, dict) else None
    if not isinstance(req_id, str) or not req_id:
        raise MalformedFrame("a frame needs headers.req_id")
    body = data.get("body")
    errcode = data.get("errcode")
    return Frame(
        cmd=str(data.get("cmd") or ""),
        req_id=req_id,
        body=body if isinstance(body, dict) else {},
        errcode=errcode if isinstance(errcode, int) else None,
        errmsg=str(data.get("errmsg") or ""),
    )


def encode(cmd: str, req_id: str, body: dict[str, Any] | None = None) -> str:
    frame: dict[str, Any] = {"cmd": cmd, "headers": {"req_id": req_id}}
    if body is not None:
        frame["body"] = body
    return json.dumps(frame, ensure_ascii=False)


def subscribe(bot_id: str, secret: str) -> tuple[str, str]:
    req_id = new_req_id(SUBSCRIBE)
    return req_id, encode(SUBSCRIBE, req_id, {"bot_id": bot_id, "secret": secret})


def ping() -> tuple[str, str]:
    req_id = new_req_id(PING)
    return req_id, encode(PING, req_id)


def stream_reply(req_id: str, stream_id: str, content: str, *, finish: bool) -> str:
    """One frame of a streamed reply: `content` is the whole text so far, not a delta."""
    stream = {"id": stream_id, "content": content, "finish": finish}
    return encode(RESPOND, req_id, {"msgtype": "stream", "stream": stream})


def markdown_message(chat_id: str, content: str) -> tuple[str, str]:
    """A message the bot sends of its own accord (no callback to answer)."""
    req_id = new_req_id(SEND)
    body = {"chatid": chat_id, "msgtype": "markdown", "markdown": {"content": content}}
    return req_id, encode(SEND, req_id, body)


@dataclass(frozen=True, slots=True)
class MediaRef:
    """A file of a callback: where it is, encrypted, and its key."""

    kind: MediaKind
    url: str
    aeskey: str


#: The callback's (or a mixed item's) message types that carry a file.
_MEDIA_TYPES: dict[str, MediaKind] = {"image": "image", "file": "file", "video": "video"}
#: The files are padded to 32-byte blocks (PKCS#7 takes the block size in bits).
_PAD_BLOCK_BITS = 256


def _media_of(body: dict[str, Any]) -> tuple[MediaRef, ...]:
    items = [body]
    if body.get("msgtype") == "mixed":
        listed = (body.get("mixed") or {}).get("msg_item") or []
        items = [item for item in listed if isinstance(item, dict)]
    found = []
    for item in items:
        kind = _MEDIA_TYPES.get(str(item.get("msgtype")))
        media = item.get(str(item.get("msgtype")))
        if kind is None or not isinstance(media, dict):
            continue
        url, aeskey = media.get("url"), media.get("aeskey")
        if isinstance(url, str) and url and isinstance(aeskey, str) and aeskey:
            found.append(MediaRef(kind, url, aeskey))
    return tuple(found)


def decrypt_media(data: bytes, aeskey: str) -> bytes:
    """A downloaded file decrypted with its message's `aeskey`; ValueError when it cannot be."""
    try:
        key = base64.b64decode(aeskey + "=" * (-len(aeskey) % 4), validate=True)
    except binascii.Error as exc:
        raise ValueError("the aeskey is not base64") from exc
    if len(key) != 32:
        raise ValueError(f"the aeskey decodes to {len(key)} bytes, not 32")
    if not data or len(data) % 16:
        raise ValueError(f"{len(data)} bytes is not a whole number of AES blocks")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    padded = decryptor.update(data) + decryptor.finalize()
    unpadder = padding.PKCS7(_PAD_BLOCK_BITS).unpadder()
    return unpadder.update(padded) + unpadder.finalize()


@dataclass(frozen=True, slots=True)
class Callback:
    """A user's message from an `aibot_msg_callback` frame."""

    req_id: str
    msg_id: str
    sender_id: str
    #: The user id in a single chat, the group's chat id in a group.
    chat_id: str
    chat_type: ChatType
    text: str
    msg_type: str
    #: Its image, file or video, or a mixed message's images, to be downloaded.
    media: tuple[MediaRef, ...] = ()


def _text_of(body: dict[str, Any]) -> str:
    msg_type = body.get("msgtype")
    if msg_type == "text":
        return str((body.get("text") or {}).get("content") or "")
    if msg_type == "voice":
        return str((body.get("voice") or {}).get("content") or "")
    if msg_type == "mixed":
        items = (body.get("mixed") or {}).get("msg_item") or []
        parts = [
            str((item.get("text") or {}).get("content") or "")
            for item in items
            if isinstance(item, dict) and item.get("msgtype") == "text"
        ]
        return "\n".join(part for part in parts if part)
    return ""


class _Origin(TypedDict):
    """Which frame, from whom, in which chat: keyword arguments of `Callback` and `CardTap`."""

    req_id: str
    msg_id: str
    sender_id: str
    chat_id: str
    chat_type: ChatType


def _origin(frame: Frame, what: str) -> _Origin:
    """Who a callback is from and in which chat: the frame's `req_id`, its `msgid`, the sender,
    and the chat (the sender's own in a single chat, the group's `chatid` in a group)."""
    body = frame.body
    msg_id = body.get("msgid")
    sender = body.get("from")
    sender_id = sender.get("userid") if isinstance(sender, dict) else None
    if not isinstance(msg_id, str) or not msg_id:
        raise MalformedFrame(f"{what} needs body.msgid")
    if not isinstance(sender_id, str) or not sender_id:
        raise MalformedFrame(f"{what} needs body.from.userid")
    chat_type: ChatType = "group" if body.get("chattype") == "group" else "single"
    chat_id = body.get("chatid") if chat_type == "group" else sender_id
    if not isinstance(chat_id, str) or not chat_id:
        raise MalformedFrame(f"a group {what.removeprefix('a ')} needs body.chatid")
    return _Origin(
        req_id=frame.req_id,
        msg_id=msg_id,
        sender_id=sender_id,
        chat_id=chat_id,
        chat_type=chat_type,
    )


def parse_callback(frame: Frame) -> Callback:
    body = frame.body
    return Callback(
        **_origin(frame, "a message callback"),
        text=_text_of(body),
        msg_type=str(body.get("msgtype") or ""),
        media=_media_of(body),
    )


# Button interaction template cards.
#
# "模板卡片类型" (developer.work.weixin.qq.com/document/path/101032), card type
# `button_interaction`: a `main_title` (its `title` and `desc` recommended at most 26 and 30
# characters), a `button_list` of at most 6 buttons `{text, style, key}` (text recommended at
# most 10 characters, style 1 to 4, a key of at most 1,024 bytes, unique in the card, which a
# tap sends back as its `event_key`), and a `task_id` (digits, letters and "_-@", at most 128
# bytes, never repeated for one bot) which the tap names. The AI bot's buttons have no link kind
# and this card no jump list: a reply's links stay in its text.
CARD_MAX_BUTTONS = 6
CARD_TITLE_MAX = 26
CARD_DESC_MAX = 30
BUTTON_TEXT_MAX = 10
BUTTON_KEY_MAX_BYTES = 1_024
TASK_ID_MAX_BYTES = 128
#: WeCom's default style for every button: the styles are colours that say nothing here.
_BUTTON_STYLE = 1
_TASK_ID_UNSAFE = re.compile(r"[^0-9A-Za-z_-]")
_TASK_ID_PREFIX = "octos-"
#: What marks the button a user chose, on the card that replaces a used one.
CHOSEN_MARK = "✓ "


def task_id_for(delivery_id: str | None) -> str:
    """The card's `task_id`: the reply's part (its delivery id) in the characters WeCom takes,
    so a resend of the part names the same card and a tap on either copy is one tap."""
    if delivery_id is None:
        return f"{_TASK_ID_PREFIX}{uuid.uuid4().hex}"
    safe = _TASK_ID_UNSAFE.sub("@", delivery_id)
    if len(_TASK_ID_PREFIX) + len(safe) > TASK_ID_MAX_BYTES:
        safe = hashlib.sha256(delivery_id.encode()).hexdigest()
    return f"{_TASK_ID_PREFIX}{safe}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def button_key(number: int, data: str, label: str, title: str, sent_at: int) -> str:
    """What a button's key carries: its place (keys are unique in a card), its data and label,
    the card's title and when it was sent, so a tap is understood, and its card replaced,
    without anything kept in memory. The title, then the label, go when they do not fit."""
    return packed_tap(
        {"n": number, "d": data, "s": sent_at, "t": label, "h": title},
        droppable=("h", "t"),
        fits=lambda packed: len(packed.encode()) <= BUTTON_KEY_MAX_BYTES,
    )


@dataclass(frozen=True, slots=True)
class PressedButton:
    """A tapped button, as its key tells it."""

    data: str
    label: str
    #: The card's title; None for a key `button_key` did not write, or wrote without it.
    title: str | None
    #: When the card was sent (seconds since the epoch), where the key tells.
    sent_at: int | None


def pressed_button(event_key: str) -> PressedButton:
    """The button a tap's `event_key` names: one `button_key` wrote, or any other key (a card
    some other program sent) as its own data and label."""
    tap = unpacked_tap(event_key)
    title = tap.fields.get("h")
    return PressedButton(
        data=tap.data,
        label=tap.label,
        title=title if isinstance(title, str) and title else None,
        sent_at=tap.sent_at,
    )


@dataclass(frozen=True, slots=True)
class ButtonCard:
    """How a reply with buttons is shown."""

    #: The template card; None when no button can be tapped (the reply's buttons are links).
    card: dict[str, Any] | None
    #: The text to send before the card (the reply's, with its links); None when the card's
    #: title shows all of it.
    text_before: str | None


def button_card(text: str, buttons: ButtonRows, *, task_id: str, sent_at: int) -> ButtonCard:
    """The card showing `buttons` (already fitted: labels within `BUTTON_TEXT_MAX`) under the
    reply `text` (Markdown). A reply of one short line (no more than the title's 26 characters)
    is the card's title, alone; a longer one goes before the card, whose title is then the
    reply's last line, cut to fit."""
    tappable = [b for row in buttons for b in row if b.url is None or b.data is not None]
    links = [
        f"{b.text}: {b.url}" for row in buttons for b in row if b.url is not None and b.data is None
    ]
    if len(tappable) > CARD_MAX_BUTTONS:
        log.warning("wecom_bot.card_buttons_cut", buttons=len(tappable), kept=CARD_MAX_BUTTONS)
        tappable = tappable[:CARD_MAX_BUTTONS]
    # The text's own indentation kept: a first line indented four spaces is code in Markdown.
    joined = "\n\n".join(part for part in (text.rstrip(), "\n".join(links)) if part.strip())
    shown = joined or None
    if not tappable:
        return ButtonCard(None, shown)
    plain = render_phone_text(text, "sms").strip()
    lines = [line.strip() for line in plain.splitlines() if line.strip()]
    if not links and len(lines) == 1 and len(lines[0]) <= CARD_TITLE_MAX:
        title, text_before = lines[0], None
    else:
        title = _cut(lines[-1] if lines else " / ".join(b.text for b in tappable), CARD_TITLE_MAX)
        text_before = shown
    button_list = [
        {
            "text": button.text,
            "style": _BUTTON_STYLE,
            "key": button_key(number, button.data or button.text, button.text, title, sent_at),
        }
        for number, button in enumerate(tappable)
    ]
    card = {
        "card_type": "button_interaction",
        "main_title": {"title": title},
        "button_list": button_list,
        "task_id": task_id,
    }
    return ButtonCard(card, text_before)


def used_card(task_id: str, pressed: PressedButton, key: str) -> dict[str, Any]:
    """What replaces a card once one of its buttons was tapped: its title, the choice marked
    under it (`main_title.desc`, recommended at most 30 characters), and the chosen button
    alone. A button interaction card has no disabled button; a tap on this one names a used
    card, which the gateway answers without passing it on."""
    title = pressed.title or _cut(pressed.label, CARD_TITLE_MAX)
    desc = _cut(CHOSEN_MARK + pressed.label, CARD_DESC_MAX)
    label = _cut(pressed.label, BUTTON_TEXT_MAX)
    return {
        "card_type": "button_interaction",
        "main_title": {"title": title, "desc": desc},
        "button_list": [{"text": label, "style": _BUTTON_STYLE, "key": key}],
        "task_id": task_id,
    }


def card_reply(req_id: str, card: dict[str, Any]) -> str:
    """The card as the reply to callback `req_id`."""
    return encode(RESPOND, req_id, {"msgtype": "template_card", "template_card": card})


def card_message(chat_id: str, card: dict[str, Any]) -> tuple[str, str]:
    """The card sent of the bot's own accord."""
    req_id = new_req_id(SEND)
    body = {"chatid": chat_id, "msgtype": "template_card", "template_card": card}
    return req_id, encode(SEND, req_id, body)


def card_update(req_id: str, card: dict[str, Any]) -> str:
    """The answer to the tap event `req_id`: `card` in place of the tapped one, for everyone
    who sees it (no `userids`)."""
    body = {"response_type": "update_template_card", "template_card": card}
    return encode(UPDATE_CARD, req_id, body)


def event_type(frame: Frame) -> str | None:
    """An event callback's `eventtype`."""
    event = frame.body.get("event")
    kind = event.get("eventtype") if isinstance(event, dict) else None
    return kind if isinstance(kind, str) else None


@dataclass(frozen=True, slots=True)
class CardTap:
    """A tap on a template card's button, from an `aibot_event_callback` frame."""

    #: The event's `req_id`: it takes only the card's update.
    req_id: str
    #: The event's own id, by which WeCom's repeated deliveries are recognised.
    msg_id: str
    sender_id: str
    chat_id: str
    chat_type: ChatType
    task_id: str
    event_key: str


def parse_card_tap(frame: Frame) -> CardTap:
    """The tap a `template_card_event` frame tells. The event's fields are under
    `event.template_card_event` (the documented form); the official SDK's types put them on
    `event` itself, which is read where the documented place is empty."""
    origin = _origin(frame, "a card event")
    event = frame.body.get("event")
    event = event if isinstance(event, dict) else {}
    nested = event.get(TEMPLATE_CARD_EVENT)
    fields = nested if isinstance(nested, dict) else {}
    task_id = fields.get("task_id") or event.get("task_id")
    event_key = fields.get("event_key") or event.get("event_key")
    if not isinstance(task_id, str) or not task_id:
        raise MalformedFrame("a card event needs event.template_card_event.task_id")
    if not isinstance(event_key, str) or not event_key:
        raise MalformedFrame("a card event needs event.template_card_event.event_key")
    return CardTap(**origin, task_id=task_id, event_key=event_key)
