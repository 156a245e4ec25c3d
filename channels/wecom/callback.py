"""The WeCom callback URL on the daemon's HTTP server: URL verification and message callbacks.

`GET ?msg_signature&timestamp&nonce&echostr`: the signature is checked, `echostr` decrypted, and
its plaintext answered (WeCom waits one second). `POST ?msg_signature&timestamp&nonce` with XML
`<Encrypt>`: the signature is checked, the payload decrypted and checked to be for our corp id,
and the message handed to the gateway; the empty 200 goes back only once `inbound.send` has
returned (the message is durable). WeCom retries a callback three times within seconds; a retry
carries the same MsgId and is answered as usual (the gateway and a small memory here dedup).

Refused: a missing or wrong signature, a timestamp outside `MAX_SKEW_S` (a replay), a payload
for another corp. A full backlog answers 429/503 with Retry-After, so WeCom retries.

Besides text, WeCom pushes an application its members' images (`PicUrl`, `MediaId`), voice
notes (`MediaId`, `Format`: amr or speex) and videos (`MediaId`, `ThumbMediaId`); the channel
fetches the file with `media/get` by its `MediaId` (valid for three days). WeCom pushes no file
messages to an application (only text, image, voice, video, location and link).
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from aiohttp import web

from bus import InboundMessage
from channels.lifecycle.bounded import InboundDedup
from channels.media_info import MediaKind
from channels.web.webhook import WebhookRefused, hand_over, is_stale, not_running, refusal_response
from channels.wecom.crypto import CryptoError, SignatureMismatch, WeComCrypto

# WeCom callback XML: the outer envelope with `<Encrypt>`, and the message inside it.
#
# The outer XML arrives before anything is verified, so it is parsed only after refusing any
# document type declaration (no entity tricks), with the standard library's expat parser (which
# never fetches external entities).
CHANNEL = "wecom"
#: The message types whose file the channel fetches, and the kind of file each is.
MEDIA_KINDS: dict[str, MediaKind] = {"image": "image", "voice": "audio", "video": "video"}
#: The message types the agent is given; others are acknowledged and skipped.
TEXT_TYPES = frozenset({"text", *MEDIA_KINDS})


class MalformedCallback(ValueError):
    """XML WeCom would not send."""


def _parse(xml: bytes) -> ElementTree.Element:
    if b"<!DOCTYPE" in xml.upper() or b"<!ENTITY" in xml.upper():
        raise MalformedCallback("document type declarations are not accepted")
    try:
        return ElementTree.fromstring(xml)
    except ElementTree.ParseError as exc:
        raise MalformedCallback(f"not XML: {exc}") from exc


def _text(root: ElementTree.Element, tag: str) -> str:
    node = root.find(tag)
    return (node.text or "").strip() if node is not None else ""


def encrypted_field(xml: bytes) -> str:
    """The base64 `<Encrypt>` of a callback body."""
    encrypted = _text(_parse(xml), "Encrypt")
    if not encrypted:
        raise MalformedCallback("no <Encrypt> element")
    return encrypted


@dataclass(frozen=True, slots=True)
class WeComMessage:
    """One decrypted callback: a user's message to the application, or an event."""

    msg_type: str
    sender: str
    create_time: int
    content: str
    msg_id: str
    agent_id: str
    event: str
    #: An image's, voice note's or video's file, for `media/get` ("" for other types).
    media_id: str = ""
    #: A voice note's format (amr, speex).
    voice_format: str = ""

    @property
    def dedup_id(self) -> str:
        """MsgId for messages; events have none, so sender and time stand in."""
        return self.msg_id or f"{self.sender}:{self.create_time}:{self.event}"

    def to_inbound(self) -> InboundMessage:
        return InboundMessage(
            channel=CHANNEL,
            sender_id=self.sender,
            chat_id=self.sender,
            content=self.content,
            message_id=self.dedup_id,
            metadata={"wecom_agent_id": self.agent_id, "wecom_msg_type": self.msg_type},
        )


def read_message(xml: bytes) -> WeComMessage:
    root = _parse(xml)
    sender = _text(root, "FromUserName")
    msg_type = _text(root, "MsgType")
    if not sender or not msg_type:
        raise MalformedCallback("a message needs FromUserName and MsgType")
    created = _text(root, "CreateTime")
    return WeComMessage(
        msg_type=msg_type,
        sender=sender,
        create_time=int(created) if created.isdigit() else 0,
        content=_text(root, "Content"),
        msg_id=_text(root, "MsgId"),
        agent_id=_text(root, "AgentID"),
        event=_text(root, "Event"),
        media_id=_text(root, "MediaId"),
        voice_format=_text(root, "Format"),
    )


log = structlog.get_logger(__name__)

#: How far a callback's timestamp may be from our clock, in seconds, before it is a replay.
MAX_SKEW_S = 300.0

Handler = Callable[[WeComMessage], Awaitable[None]]


class CallbackReceiver:
    """The aiohttp handlers of the callback path; `handle` is set while the channel runs."""

    def __init__(self, crypto: WeComCrypto, *, clock: Callable[[], float] = time.time) -> None:
        self._crypto = crypto
        self._clock = clock
        self._recent = InboundDedup(max_entries=4096, ttl_s=3600.0)
        self.handle: Handler | None = None

    def _query(self, request: web.Request, *names: str) -> list[str]:
        values = [request.query.get(name, "") for name in names]
        if not all(values):
            missing = [name for name, value in zip(names, values, strict=True) if not value]
            raise WebhookRefused(401, "unsigned: no " + ", ".join(missing))
        timestamp = values[1]
        if is_stale(timestamp, self._clock(), MAX_SKEW_S):
            raise WebhookRefused(401, "stale timestamp")
        return values

    def _open(self, signature: str, timestamp: str, nonce: str, encrypted: str) -> bytes:
        try:
            self._crypto.verify(signature, timestamp, nonce, encrypted)
            return self._crypto.decrypt(encrypted)
        except SignatureMismatch:
            raise WebhookRefused(401, "wrong signature") from None
        except CryptoError as exc:
            raise WebhookRefused(403, f"cannot decrypt: {exc}") from None

    async def verify_url(self, request: web.Request) -> web.Response:
        try:
            signature, timestamp, nonce, echostr = self._query(
                request, "msg_signature", "timestamp", "nonce", "echostr"
            )
            plain = self._open(signature, timestamp, nonce, echostr)
        except WebhookRefused as refused:
            return refusal_response(request, refused, event="wecom.callback_refused")
        log.info("wecom.url_verified")
        return web.Response(body=plain, content_type="text/plain")

    async def receive(self, request: web.Request) -> web.Response:
        try:
            signature, timestamp, nonce = self._query(
                request, "msg_signature", "timestamp", "nonce"
            )
            try:
                encrypted = encrypted_field(await request.read())
            except MalformedCallback as exc:
                raise WebhookRefused(400, str(exc)) from None
            plain = self._open(signature, timestamp, nonce, encrypted)
        except WebhookRefused as refused:
            return refusal_response(request, refused, event="wecom.callback_refused")
        handle = self.handle
        if handle is None:
            return not_running()
        try:
            message = read_message(plain)
        except MalformedCallback as exc:
            # Signed by WeCom but unreadable: retrying cannot help, so it is acknowledged.
            log.warning("wecom.malformed_callback_skipped", error=str(exc))
            return web.Response(text="")
        if message.msg_type not in TEXT_TYPES or message.dedup_id in self._recent:
            log.debug("wecom.callback_skipped", msg_type=message.msg_type, id=message.dedup_id)
            return web.Response(text="")
        refusal = await hand_over(handle(message), event="wecom.callback_deferred")
        if refusal is not None:
            return refusal
        self._recent.seen(message.dedup_id)
        return web.Response(text="")
