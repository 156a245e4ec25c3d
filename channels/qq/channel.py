"""The QQ bot channel (API v2): signed webhook events (or the websocket gateway) in, passive
replies out.

In webhook mode QQ POSTs events to `webhook_path` on the daemon's HTTP server (see
`webhook.py`: Ed25519 signatures checked, op 12 acknowledgement only once the message is
durable). In websocket mode `start()` keeps a gateway connection (see `gateway_ws.py`),
reconnecting with backoff and resuming the session, also after a restart (the session is kept
in the data directory). Either way `start()` checks the credentials (a token QQ refuses is
fatal) and takes events until stopped; webhook events from the start, while the token is
fetched.

Replies: QQ bots may only answer a user's message (`msg_id`, see `PassiveReplies`) or tap
(`event_id`), at most five times, so a long reply is split into at most four messages and a
notice that the rest was cut (`max_reply_messages`). Plain text (`msg_type` 0): QQ renders
Markdown only for bots it granted it. With `keyboard: true` (`QQKeyboardChannel`) the message
that carries a reply's buttons is Markdown (`msg_type` 2) with them as a keyboard, and a tap
(INTERACTION_CREATE) is a message of its chat, answered to QQ once durable (see `keyboard.py`).
A reply's PNG or JPEG image or MP4 video is rich media: QQ fetches it from the gateway's signed
link (`POST .../files`, which must be public HTTPS: `http.public_url`), and a `msg_type` 7
reply names the `file_info` it answered; other files, or no such link, go as the link in text.

A message's `attachments` (`{content_type, filename, url, size, width, height}`; a voice note's
content_type is "voice", its `voice_wav_url` a WAV of it) are downloaded for allowed senders
(`channels.media_files.MediaIntake`) into `{data_dir}/media/qq-bot/<chat_id>/`; QQ sometimes
gives the URL without its scheme, which is https.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal

import aiohttp
import structlog
from aiohttp import web

from bus import Attachment as ReplyFile
from bus import InboundMessage, InboundSender, OutboundMessage
from channels.buttons import unpacked_tap
from channels.errors import ChannelError, RateLimited, TransientError
from channels.health import ChannelHealth
from channels.lifecycle.bounded import InboundDedup, RecentMap
from channels.lifecycle.reconnect import ReconnectPolicy, reconnecting
from channels.lifecycle.run_state import CredentialsCheck, RunStateChannel
from channels.media_files import MediaStore, safe_file_name
from channels.media_info import kind_for, mime_for
from channels.media_links import link_to
from channels.qq.api import CHANNEL, AlreadyDelivered, QQApi, ReplyWindowClosed, access_token
from channels.qq.gateway_ws import (
    INTENTS,
    DispatchHandler,
    GatewaySession,
    SessionFile,
    SessionState,
)
from channels.qq.keyboard import (
    BUTTON_INTERACTION,
    INTERACTION_EVENT,
    INTERACTION_INTENT,
    KEYBOARD_LIMITS,
    TAP_PREFIX,
    keyboard,
    reply_target,
    with_labels,
)
from channels.qq.webhook import QQWebhook
from channels.retry.pacing import Rate, RateLimits
from channels.split.limits import PLATFORM_LIMITS, PlatformLimit
from channels.stopping import until_stopped, until_taken
from channels.web.client import LazySession
from config import QQBotConfig

# Passive replies: QQ answers only within a window after the user's message, five at most.
#
# Since 2025-04 a QQ bot can only reply (`msg_id` of the user's message, plus `msg_seq`, unique
# per `msg_id`): within 60 minutes in a C2C chat, 5 minutes in a group, and at most 5 replies per
# message. `msg_seq` is counted per `msg_id` (octos used one global counter, and the same pair
# twice is refused). Where the reply carries a `delivery_id` (`<turn>.<part>`), the part number
# picks the sequence, so a resend after a crash repeats its pair and QQ reports it as known
# instead of showing it twice. A reply's files (`<turn>.<part>.fileN`) take the sequences from
# FILE_SEQ_BASE up, clear of the text's; the five replies are counted either way.
ChatKind = Literal["c2c", "group"]
MAX_REPLIES = 5
FILE_SEQ_BASE = 10
WINDOW_S: dict[ChatKind, float] = {"c2c": 3600.0, "group": 300.0}


@dataclass(slots=True)
class _Received:
    kind: ChatKind
    received_at: float
    used: set[int] = field(default_factory=set)


class PassiveReplies:
    def __init__(
        self, *, capacity: int = 20_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self._messages: RecentMap[str, _Received] = RecentMap(capacity)

    def received(self, msg_id: str, kind: ChatKind) -> None:
        if msg_id in self._messages:
            return
        self._messages.remember(msg_id, _Received(kind, self._clock()))

    def next_seq(self, msg_id: str, kind: ChatKind, delivery_id: str | None) -> int:
        """The `msg_seq` of the next reply to `msg_id`; ReplyWindowClosed when none is left."""
        record = self._messages.get(msg_id)
        if record is None:
            # Received before a restart: its age is unknown, QQ will say if it is too old.
            record = _Received(kind, self._clock())
            self._messages[msg_id] = record
        if self._clock() - record.received_at > WINDOW_S[record.kind]:
            raise ReplyWindowClosed(
                f"message {msg_id} is older than QQ's reply window "
                f"({WINDOW_S[record.kind] / 60:g} min)",
                channel=CHANNEL,
            )
        # A delivery id fixes the sequence, so a retry of the same part repeats its pair.
        seq = _part_seq(delivery_id)
        if seq is None:
            free = [n for n in range(1, MAX_REPLIES + 1) if n not in record.used]
            seq = free[0] if free else None
        if (
            seq is None
            or MAX_REPLIES < seq <= FILE_SEQ_BASE
            or len(record.used - {seq}) >= MAX_REPLIES
        ):
            raise ReplyWindowClosed(
                f"message {msg_id} already has QQ's {MAX_REPLIES} replies", channel=CHANNEL
            )
        record.used.add(seq)
        return seq


def _part_seq(delivery_id: str | None) -> int | None:
    if not delivery_id:
        return None
    _, dot, part = delivery_id.rpartition(".")
    if dot and part.startswith("file") and part[4:].isdigit():
        return FILE_SEQ_BASE + int(part[4:])
    if not dot or not part.isdigit():
        return None
    return int(part) + 1


# QQ bot open platform, 富媒体消息 (POST /v2/users/{openid}/files, /v2/groups/{id}/files):
# `file_type` 1 an image (png/jpg), 2 a video (mp4), 3 a voice note (silk), 4 a file (not open
# to bots); QQ downloads `url` itself.
RICH_MEDIA_TYPES = {"image/png": 1, "image/jpeg": 1, "video/mp4": 2}


# QQ message events (`op 0` dispatches) as the gateway's inbound messages.
#
# `C2C_MESSAGE_CREATE` is a user writing to the bot; `GROUP_AT_MESSAGE_CREATE` a group member
# mentioning it. The chat id keeps which one it was (`c2c:<user_openid>`, `group:<group_openid>`),
# so a reply after a restart still goes to the right API (octos lost that on restart).
C2C_MESSAGE = "C2C_MESSAGE_CREATE"
GROUP_MESSAGE = "GROUP_AT_MESSAGE_CREATE"
MESSAGE_EVENTS = frozenset({C2C_MESSAGE, GROUP_MESSAGE})


class MalformedEvent(ValueError):
    """An event of a known type without the fields it must have."""


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file of a message, as QQ describes it."""

    url: str
    mime: str | None
    name: str | None
    size: int | None


def _attachments(data: dict[str, Any]) -> tuple[Attachment, ...]:
    found = []
    for item in data.get("attachments") or []:
        if not isinstance(item, dict):
            continue
        content_type = item.get("content_type")
        # A voice note is SILK ("voice"); QQ also offers it as WAV, which a transcriber reads.
        wav = item.get("voice_wav_url") if content_type == "voice" else None
        url = wav or item.get("url")
        if not isinstance(url, str) or not url:
            continue
        if "://" not in url:
            url = "https://" + url.lstrip("/")
        if wav:
            mime: str | None = "audio/wav"
        else:
            mime = content_type if isinstance(content_type, str) and "/" in content_type else None
        name, size = item.get("filename"), item.get("size")
        found.append(
            Attachment(
                url=url,
                mime=mime,
                name=name if isinstance(name, str) and name else None,
                size=size if isinstance(size, int) else None,
            )
        )
    return tuple(found)


@dataclass(frozen=True, slots=True)
class QQMessage:
    """A message event: its ids (dedup, the passive reply window) and, when it has text, the
    message for the gateway."""

    event_id: str
    msg_id: str
    kind: ChatKind
    inbound: InboundMessage | None
    attachments: tuple[Attachment, ...] = ()


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
    attachments = _attachments(data)
    inbound = (
        InboundMessage(
            channel=CHANNEL,
            sender_id=sender,
            chat_id=chat_id,
            content=text,
            message_id=msg_id,
            metadata={"chat_type": kind},
        )
        if text or attachments
        else None
    )
    return QQMessage(str(event_id), msg_id, kind, inbound, attachments)


@dataclass(frozen=True, slots=True)
class QQTap:
    """A tap on a button (INTERACTION_CREATE): the interaction to answer and, when it is the
    tap of a message button in a C2C or group chat, the message for the gateway (else None,
    and `skipped` says why)."""

    interaction_id: str
    #: `tap:<event id>`: the tap's message id, which a reply to it names.
    message_id: str
    kind: ChatKind
    inbound: InboundMessage | None
    skipped: str = ""


def parse_tap(payload: dict[str, Any]) -> QQTap:
    """The tap in an INTERACTION_CREATE dispatch; MalformedEvent when it names no interaction
    (which then cannot even be answered)."""
    data = payload.get("d")
    if not isinstance(data, dict):
        raise MalformedEvent("the event has no d object")
    interaction_id = _text(data.get("id"), "d.id")
    event_id = payload.get("id")
    # A reply to a tap names its event; the event id is the same on a redelivery.
    message_id = TAP_PREFIX + (
        event_id if isinstance(event_id, str) and event_id else interaction_id
    )

    def skipped(why: str, kind: ChatKind = "c2c") -> QQTap:
        return QQTap(interaction_id, message_id, kind, None, why)

    if data.get("type") != BUTTON_INTERACTION:
        return skipped(f"interaction type {data.get('type')!r}, not a message button")
    # chat_type: 0 a guild, 1 a group, 2 a C2C chat (`scene` says the same in words).
    chat_type, scene = data.get("chat_type"), data.get("scene")
    kind: ChatKind
    if chat_type == 2 or scene == "c2c":
        kind, sender, where = "c2c", data.get("user_openid"), data.get("user_openid")
    elif chat_type == 1 or scene == "group":
        kind, sender, where = "group", data.get("group_member_openid"), data.get("group_openid")
    else:
        return skipped(f"a tap in a {scene or 'guild'} chat, which this channel does not serve")
    if not isinstance(sender, str) or not sender or not isinstance(where, str) or not where:
        return skipped("the tap names no user or chat", kind)
    button = data.get("data")
    resolved = button.get("resolved") if isinstance(button, dict) else None
    raw = resolved.get("button_data") if isinstance(resolved, dict) else None
    if not isinstance(raw, str) or not raw:
        return skipped("the tap names no button_data", kind)
    tap = unpacked_tap(raw)
    metadata: dict[str, Any] = {"chat_type": kind, **tap.metadata()}
    inbound = InboundMessage(
        channel=CHANNEL,
        sender_id=sender,
        chat_id=f"{kind}:{where}",
        content=tap.label,
        message_id=message_id,
        metadata=metadata,
    )
    return QQTap(interaction_id, message_id, kind, inbound)


def target(chat_id: str) -> tuple[ChatKind, str]:
    """The chat kind and openid a chat id names; ValueError for a chat id of another form."""
    kind, _, openid = chat_id.partition(":")
    if kind not in ("c2c", "group") or not openid:
        raise ValueError(f"not a QQ chat id: {chat_id!r} (expected c2c:<openid> or group:<openid>)")
    return ("c2c" if kind == "c2c" else "group"), openid


# The QQ bot platform's published send rate, which the manager's scheduler keeps every call
# within.
#
# QQ bot open platform, 发送消息 (https://bot.q.qq.com/wiki/develop/api-v2/server-inter/message/send-receive/send.html):
# "不论主动消息还是被动消息，在一个子频道中，每 1s 只能发送 5 条消息" (five messages a second in one
# channel). The other documented limit, five replies to one user message, is the channel's
# `max_reply_messages`.
RATE_LIMITS = RateLimits(chat=Rate(5, 1.0))


log = structlog.get_logger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def session_path(data_dir: Path, app_id: str) -> Path:
    """The file a bot's gateway session is kept in, in the profile's data directory."""
    return data_dir / "qq" / f"{_UNSAFE.sub('_', app_id).strip('._') or 'bot'}.session.json"


#: After the gateway connection ends: 1 s, doubling to a minute while it keeps failing.
RECONNECT = ReconnectPolicy(base_s=1.0, cap_s=60.0)


class QQBotChannel(RunStateChannel):
    name = CHANNEL
    rate_limits = RATE_LIMITS
    limit: ClassVar[PlatformLimit] = PLATFORM_LIMITS["qq-bot"]
    max_reply_messages: ClassVar[int | None] = MAX_REPLIES

    def __init__(
        self,
        config: QQBotConfig,
        *,
        data_dir: Path | None = None,
        request_timeout_s: float = 10.0,
        reconnect: ReconnectPolicy = RECONNECT,
    ) -> None:
        app_secret = config.app_secret.get_secret_value()
        self._mode = config.mode
        self._reconnect = reconnect
        self._gateway_state = SessionState()
        #: Where the gateway session is kept across restarts (websocket mode); None: nowhere.
        self._session_file = (
            None if data_dir is None else SessionFile(session_path(data_dir, config.app_id))
        )
        #: Where users' files are kept; None: nowhere, and they are not downloaded.
        self._media = None if data_dir is None else MediaStore(data_dir, CHANNEL)
        self._webhook_path = config.webhook_path
        self._http_session = LazySession()
        self._token = access_token(
            self._http,
            token_url=config.token_url,
            app_id=config.app_id,
            app_secret=app_secret,
            timeout_s=request_timeout_s,
        )
        self._api = QQApi(
            self._http, self._token, base_url=config.api_base_url, timeout_s=request_timeout_s
        )
        self._webhook = QQWebhook(app_secret)
        self._replies = PassiveReplies()
        self._dedup = InboundDedup(max_entries=10_000, ttl_s=24 * 3600.0)
        # Receiving once the webhook is live, or the gateway said READY.
        super().__init__(not_receiving=ChannelHealth.degraded("not receiving QQ events"))

    def _http(self) -> aiohttp.ClientSession:
        return self._http_session.get()

    def web_routes(self) -> Sequence[web.AbstractRouteDef]:
        if self._mode != "webhook":
            return ()
        return [web.post(self._webhook_path, self._webhook.handle_request)]

    async def start(self, inbound: InboundSender) -> None:
        await self._run_state.run(self._receive(inbound))

    async def _receive(self, inbound: InboundSender) -> None:
        async def take(payload: dict[str, Any]) -> None:
            await self._take(inbound, payload)

        try:
            if self._mode == "webhook":
                # Events are taken while the token is fetched: the journal is open already.
                self._webhook.handle = take
                self._run_state.receiving.set()
            checked = self._run_state.check_credentials(
                CredentialsCheck(self._token.get, "QQ refused the credentials", CHANNEL)
            )
            await until_stopped(checked, self._run_state.stopping, name="qq:token")
            if self._mode == "websocket":
                await self._gateway_until_stopped(inbound)
            else:
                log.info("qq.webhook_ready", path=self._webhook_path)
                await self._run_state.stopping.wait()
        finally:
            self._webhook.handle = None
            await self._close_http()

    async def _gateway_until_stopped(self, inbound: InboundSender) -> None:
        if self._session_file is not None:
            self._gateway_state = await self._session_file.load()

        async def take(payload: dict[str, Any]) -> None:
            await until_taken(lambda: self._take(inbound, payload), event="qq.inbound_refused")

        await reconnecting(
            lambda: until_stopped(
                self._gateway_session(take), self._run_state.stopping, name="qq:gateway"
            ),
            self._run_state.stopping,
            channel=CHANNEL,
            failed_event="qq.gateway_failed",
            policy=self._reconnect,
            on_ended=self._run_state.receiving.clear,
        )

    async def _gateway_session(self, take: DispatchHandler) -> None:
        gateway = await self._api.call("GET", "/gateway")
        url = gateway.get("url")
        if not isinstance(url, str) or not url:
            raise TransientError(f"GET /gateway named no url: {gateway!r}", channel=CHANNEL)
        token = await self._token.get()
        socket = await asyncio.wait_for(self._http().ws_connect(url), 10.0)
        try:
            # Taps come over the gateway only to a session that asked for them.
            keyboard_shown = self.buttons_shown == "in_send"
            session = GatewaySession(
                socket,
                self._gateway_state,
                token=token,
                intents=INTENTS | (INTERACTION_INTENT if keyboard_shown else 0),
                on_dispatch=take,
                on_ready=self._run_state.receiving.set,
                on_progress=None if self._session_file is None else self._session_file.save,
            )
            await session.run()
        finally:
            with contextlib.suppress(TimeoutError, aiohttp.ClientError):
                await asyncio.wait_for(socket.close(), 2.0)

    async def _take(self, inbound: InboundSender, payload: dict[str, Any]) -> None:
        if payload.get("t") == INTERACTION_EVENT:
            await self._take_tap(inbound, payload)
            return
        try:
            message = parse_message(payload)
        except MalformedEvent as exc:
            # Acknowledged all the same: QQ would only send the same malformed event again.
            log.warning("qq.malformed_event_skipped", error=str(exc), event=payload.get("t"))
            return
        if message is None:
            log.debug("qq.event_ignored", event=payload.get("t"))
            return
        if message.event_id in self._dedup:
            log.info("qq.duplicate_skipped", event_id=message.event_id)
            return
        self._replies.received(message.msg_id, message.kind)
        if message.inbound is not None:
            await inbound.send(await self._with_attachments(message, message.inbound))
        self._dedup.seen(message.event_id)

    async def _take_tap(self, inbound: InboundSender, payload: dict[str, Any]) -> None:
        """A tap on a button goes to the gateway once (by its interaction id); once it is
        durable QQ is told the tap was handled (`PUT /interactions/{id}`), or the user's QQ
        shows it failing. A tap not passed on (a guild's, a quick menu's) is answered too, and
        so is a redelivered one: the first answer may be what got lost."""
        try:
            tap = parse_tap(payload)
        except MalformedEvent as exc:
            log.warning("qq.malformed_event_skipped", error=str(exc), event=INTERACTION_EVENT)
            return
        if tap.interaction_id in self._dedup:
            log.info("qq.duplicate_skipped", event_id=tap.interaction_id)
        elif tap.inbound is None:
            log.info("qq.tap_not_taken", interaction_id=tap.interaction_id, reason=tap.skipped)
        else:
            self._replies.received(tap.message_id, tap.kind)
            await inbound.send(tap.inbound)
            self._dedup.seen(tap.interaction_id)
        try:
            await self._api.acknowledge_interaction(tap.interaction_id)
        except ChannelError as exc:
            # The tap is durable whatever QQ was told: the user's QQ may show it failed.
            log.warning(
                "qq.tap_not_acknowledged", interaction_id=tap.interaction_id, error=str(exc)
            )

    async def _with_attachments(
        self, message: QQMessage, received: InboundMessage
    ) -> InboundMessage:
        """The message with its files downloaded; a stranger's are not (the dispatcher will
        refuse the message): their kinds alone stand for what was sent."""
        if not message.attachments:
            return received
        if self._media is None or not self.is_allowed(received.sender_id):
            kinds = [f"[{kind_for(a.mime or mime_for(a.name or ''))}]" for a in message.attachments]
            content = " ".join(part for part in (received.content, *kinds) if part)
            return received.model_copy(update={"content": content})
        store = self._media
        intake = store.intake(received, self.max_media_bytes)
        for number, attachment in enumerate(message.attachments):
            name = f"{message.msg_id}_{number}_{safe_file_name(attachment.name or 'file')}"
            fetch = partial(
                store.fetch,
                self._http(),
                attachment.url,
                chat_id=received.chat_id,
                name=name,
                max_bytes=intake.max_bytes,
            )
            await intake.take(
                fetch, name=attachment.name, mime=attachment.mime, size=attachment.size
            )
        return intake.message()

    async def stop(self) -> None:
        self._webhook.handle = None
        await super().stop()
        await self._close_http()

    async def _close_http(self) -> None:
        await self._http_session.close()

    async def send(self, message: OutboundMessage) -> None:
        if not message.content.strip():
            # Media would need QQ's rich-media upload first; not built yet.
            log.warning("qq.media_not_sent", chat_id=message.chat_id, media=len(message.media))
            return
        try:
            kind, openid = target(message.chat_id)
        except ValueError as exc:
            raise ChannelError(str(exc), channel=CHANNEL) from exc
        msg_ids = message.answered_ids()
        if not msg_ids:
            raise ReplyWindowClosed(
                "QQ bots can only reply to a user's message, and this names none",
                channel=CHANNEL,
            )
        answered = msg_ids[0]
        seq = self._replies.next_seq(answered, kind, message.delivery_id)
        path = f"/v2/users/{openid}/messages" if kind == "c2c" else f"/v2/groups/{openid}/messages"
        body = {
            "content": message.content,
            "msg_type": 0,
            **reply_target(answered),
            "msg_seq": seq,
        }
        if message.buttons and self.buttons_shown == "in_send":
            await self._send_keyboard(path, body, message)
            return
        await self._post_reply(path, body)

    async def _post_reply(self, path: str, body: dict[str, Any]) -> None:
        try:
            await self._api.post_message(path, body)
        except AlreadyDelivered:
            answered = body.get("msg_id") or body.get("event_id")
            log.info("qq.reply_already_delivered", msg_id=answered, msg_seq=body.get("msg_seq"))

    async def _send_keyboard(
        self, path: str, body: dict[str, Any], message: OutboundMessage
    ) -> None:
        """The reply as Markdown with its buttons as a keyboard; refused (the bot lacks QQ's
        permission for them), as plain text with the buttons' labels, under the same `msg_seq`
        (QQ took nothing under it)."""
        # The resend of a part names the same message (its delivery id), so a tap on either
        # copy is one tap.
        held_id = message.delivery_id or uuid.uuid4().hex
        markdown = {key: value for key, value in body.items() if key != "content"}
        markdown["msg_type"] = 2
        markdown["markdown"] = {"content": message.content}
        markdown["keyboard"] = keyboard(message.buttons, held_id, int(time.time()))
        try:
            await self._post_reply(path, markdown)
        except (RateLimited, TransientError, ReplyWindowClosed):
            raise
        except ChannelError as exc:
            log.warning(
                "qq.keyboard_refused",
                chat_id=message.chat_id,
                error=str(exc),
                suggestion="set keyboard: false unless QQ granted the bot Markdown and "
                "custom keyboard permission",
            )
            plain = {**body, "content": with_labels(message.content, message.buttons)}
            await self._post_reply(path, plain)

    async def send_attachment(
        self, chat_id: str, attachment: ReplyFile, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        """An image or video as rich media QQ fetches from the gateway's public HTTPS link,
        then a `msg_type` 7 reply naming it; anything else: the default, the link as text."""
        url = link_to(attachment, self.media_links)
        file_type = RICH_MEDIA_TYPES.get(attachment.mime)
        if url is None or not url.startswith("https://") or file_type is None or not reply_to:
            return await super().send_attachment(
                chat_id, attachment, reply_to=reply_to, delivery_key=delivery_key
            )
        try:
            kind, openid = target(chat_id)
        except ValueError as exc:
            raise ChannelError(str(exc), channel=CHANNEL) from exc
        seq = self._replies.next_seq(reply_to, kind, delivery_key)
        base = f"/v2/users/{openid}" if kind == "c2c" else f"/v2/groups/{openid}"
        upload = {"file_type": file_type, "url": url, "srv_send_msg": False}
        uploaded = await self._api.post_message(f"{base}/files", upload)
        file_info = uploaded.get("file_info")
        if not isinstance(file_info, str):
            raise ChannelError("the rich media upload answered no file_info", channel=CHANNEL)
        body = {
            "content": " ",
            "msg_type": 7,
            "media": {"file_info": file_info},
            **reply_target(reply_to),
            "msg_seq": seq,
        }
        await self._post_reply(f"{base}/messages", body)
        return None

    async def probe(self) -> str | None:
        try:
            me = await self._api.me()
        finally:
            await self._close_http()
        return f"QQ bot {me.get('username', '?')} (id {me.get('id', '?')})"


class QQKeyboardChannel(QQBotChannel):
    """The QQ bot with `keyboard: true`: `send` shows a reply's buttons as a keyboard under it,
    and taps come back as INTERACTION_CREATE."""

    buttons_shown = "in_send"
    button_limits = KEYBOARD_LIMITS
