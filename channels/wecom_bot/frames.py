"""The WeCom AI bot's websocket frames, as the long-connection protocol defines them.

Every frame is JSON `{cmd, headers: {req_id}, body}`. The server answers each frame the client
sends (`aibot_subscribe`, `ping`, `aibot_respond_msg`, `aibot_send_msg`) with an acknowledgement
`{headers: {req_id}, errcode, errmsg}` carrying the same `req_id`. It pushes user messages as
`aibot_msg_callback` and events (enter_chat, disconnected_event...) as `aibot_event_callback`;
a reply to a message reuses that callback's `req_id`.

A callback's image, file or video (alone, or among the items of a `mixed` message) is
`{"url", "aeskey"}`: the URL serves the file encrypted with AES-256-CBC under that message's own
key (base64 `aeskey`, the IV its first 16 bytes, PKCS#7 padded to 32-byte blocks), which
`decrypt_media` undoes. A voice message arrives already recognised by WeCom, as text.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from channels.media_info import MediaKind
from channels.web.webhook import UnreadableJson, json_payload

SUBSCRIBE = "aibot_subscribe"
PING = "ping"
RESPOND = "aibot_respond_msg"
SEND = "aibot_send_msg"
MESSAGE_CALLBACK = "aibot_msg_callback"
EVENT_CALLBACK = "aibot_event_callback"
#: The event telling this connection another one took over the bot (one connection per bot).
DISCONNECTED_EVENT = "disconnected_event"

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


def parse_callback(frame: Frame) -> Callback:
    body = frame.body
    msg_id = body.get("msgid")
    sender = body.get("from")
    sender_id = sender.get("userid") if isinstance(sender, dict) else None
    if not isinstance(msg_id, str) or not msg_id:
        raise MalformedFrame("a message callback needs body.msgid")
    if not isinstance(sender_id, str) or not sender_id:
        raise MalformedFrame("a message callback needs body.from.userid")
    chat_type: ChatType = "group" if body.get("chattype") == "group" else "single"
    chat_id = body.get("chatid") if chat_type == "group" else sender_id
    if not isinstance(chat_id, str) or not chat_id:
        raise MalformedFrame("a group message callback needs body.chatid")
    return Callback(
        req_id=frame.req_id,
        msg_id=msg_id,
        sender_id=sender_id,
        chat_id=chat_id,
        chat_type=chat_type,
        text=_text_of(body),
        msg_type=str(body.get("msgtype") or ""),
        media=_media_of(body),
    )
