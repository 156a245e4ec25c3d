"""The WeCom application channel: callbacks in through the daemon's HTTP server, replies out
with `message/send`.

`start()` serves the callback route until stopped, from the start, while it fetches an access
token (bad credentials are fatal). Replies go to the user who wrote as text messages (plain text
shows everywhere, the WeChat plug-in included; content the manager marks as formatted goes as
WeCom Markdown), at most 2,048 UTF-8 bytes each: the manager splits to that. No more than 30 go
to one member a minute (`pacing.py`: WeCom drops the rest silently). WeCom cannot edit a sent
message, so streamed replies arrive whole. A reply's file is uploaded (`media/upload`) and sent
as an `image`, `voice`, `video` or `file` message by its `media_id`.

An allowed member's image, voice note or video is fetched with `media/get` before the message
goes to the gateway (`channels.media_files.MediaIntake`), into `{data_dir}/media/wecom/<user>/`.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import structlog
from aiohttp import web

from bus import Attachment, InboundMessage, InboundSender, OutboundMessage
from channels.base import FORMATTED
from channels.errors import AuthError, ChannelError, MessageTooLong, RateLimited, TransientError
from channels.lifecycle.run_state import CredentialsCheck, RunStateChannel
from channels.media_files import MediaStore, read_file, safe_suffix, suffix_for
from channels.media_info import too_large_reason
from channels.retry.pacing import Rate, RateLimits
from channels.split.limits import PLATFORM_LIMITS, PlatformLimit
from channels.web.client import IssuedToken, TokenApi, TokenRefused, issued_token
from channels.wecom.callback import MEDIA_KINDS, CallbackReceiver, WeComMessage
from channels.wecom.crypto import WeComCrypto
from config import WeComConfig

# WeCom's server API over aiohttp: `gettoken`, `message/send`, `media/get` and `media/upload`,
# errors in the manager's words.
#
# WeCom answers HTTP 200 with `{"errcode", "errmsg"}` for nearly everything: 0 is success,
# 40014/42001 an invalid or expired access token (refetched once, then the call is repeated),
# 45009 and its kin a frequency limit (waited out by the retry layer), 40001/40013/60020 bad
# credentials or a server IP not on the app's list.
CHANNEL = "wecom"

#: WeCom says nothing of when to try again; its limits are counted per minute.
RATE_LIMIT_WAIT_S = 3.0

# WeCom server API, "上传临时素材" (media/upload): every file over 5 bytes; images JPG and PNG up
# to 10 MB, voice AMR up to 2 MB (60 s), video MP4 up to 10 MB, any file up to 20 MB. What its
# own kind does not take goes as a file.
MB = 1024 * 1024
MIN_UPLOAD_BYTES = 6
MAX_FILE_BYTES = 20 * MB
_NATIVE: dict[str, tuple[str, int]] = {
    "image/jpeg": ("image", 10 * MB),
    "image/png": ("image", 10 * MB),
    "audio/amr": ("voice", 2 * MB),
    "video/mp4": ("video", 10 * MB),
}


def upload_type(mime: str, size: int) -> str:
    """The `media/upload` type (and message type) a file of `mime` and `size` bytes goes as."""
    kind, max_bytes = _NATIVE.get(mime, ("file", MAX_FILE_BYTES))
    return kind if size <= max_bytes else "file"


class WeComApi(TokenApi):
    channel = CHANNEL
    credentials_hint = "check corp_id and secret"

    async def _fetch_token(self) -> IssuedToken:
        params = {"corpid": self.client_id, "corpsecret": self._secret}
        body = await self._request("GET", "/cgi-bin/gettoken", "gettoken", params=params)
        return issued_token(body, "access_token", "expires_in", channel=CHANNEL)

    async def call(self, path: str, what: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """POST `payload` with the cached access token; a refused token is refetched once."""

        async def post(token: str) -> dict[str, Any]:
            return await self._request(
                "POST", path, what, params={"access_token": token}, json=payload
            )

        return await self.tokens.call_with_token(post, what=what)

    async def media(self, media_id: str, max_bytes: int) -> tuple[bytes, str]:
        """A received file's bytes and content type (`GET media/get`); `ChannelError` when
        WeCom refuses it (its JSON answer, HTTP 200 as ever) or it is over `max_bytes`."""

        async def get(token: str) -> tuple[bytes, str]:
            params = {"access_token": token, "media_id": media_id}
            async with (
                self.deadline("media/get"),
                self.http().get(self.base_url + "/cgi-bin/media/get", params=params) as response,
            ):
                if response.status != 200:
                    raise ChannelError(
                        f"the download answered HTTP {response.status}", channel=CHANNEL
                    )
                if response.content_type in ("application/json", "text/plain"):
                    refusal = await response.json(content_type=None)
                    check(refusal if isinstance(refusal, dict) else {}, "media/get")
                    raise ChannelError("media/get answered no file", channel=CHANNEL)
                data = bytearray()
                async for block in response.content.iter_chunked(64 * 1024):
                    data.extend(block)
                    if len(data) > max_bytes:
                        raise ChannelError(too_large_reason(max_bytes), channel=CHANNEL)
                return bytes(data), response.content_type

        return await self.tokens.call_with_token(get, what="media/get")

    async def upload(self, media_type: str, name: str, mime: str, data: bytes) -> str:
        """`media/upload` of one file as `media_type` (image, voice, video or file); its
        `media_id`, valid three days."""

        async def post(token: str) -> dict[str, Any]:
            form = aiohttp.FormData()
            form.add_field("media", data, filename=name, content_type=mime)
            params = {"access_token": token, "type": media_type}
            return await self._request(
                "POST", "/cgi-bin/media/upload", what, params=params, form=form
            )

        what = "media/upload"
        body = await self.tokens.call_with_token(post, what=what)
        media_id = body.get("media_id")
        if not isinstance(media_id, str):
            raise ChannelError("media/upload answered without a media_id", channel=CHANNEL)
        return media_id

    async def _request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        params: Mapping[str, str],
        json: Mapping[str, Any] | None = None,
        form: aiohttp.FormData | None = None,
    ) -> dict[str, Any]:
        url = self.base_url + path
        async with (
            self.deadline(what),
            self.http().request(method, url, params=params, json=json, data=form) as response,
        ):
            if response.status >= 500:
                raise TransientError(f"{what}: HTTP {response.status}", channel=CHANNEL)
            if response.status == 429:
                raise RateLimited(RATE_LIMIT_WAIT_S, f"{what}: HTTP 429", channel=CHANNEL)
            try:
                body = await response.json(content_type=None)
            except ValueError as exc:
                raise TransientError(f"{what}: the answer is not JSON", channel=CHANNEL) from exc
        if not isinstance(body, dict):
            raise TransientError(f"{what}: the answer is not a JSON object", channel=CHANNEL)
        check(body, what)
        return body


# What the answers' codes mean, as `check` raises them.
INVALID_TOKEN = frozenset({40014, 42001})
#: 45009 "api freq out of limit", 45033 too many concurrent calls, 45047 too many unread
#: messages per member (U), -1 "system busy".
RATE_LIMITED = frozenset({45009, 45033, 45047})
BUSY = frozenset({-1})
CREDENTIALS = {
    40001: "check secret: it is the application's Secret, not the corp's",
    40013: "check corp_id (My Company > Corp ID)",
    40056: "check agent_id",
    60020: "add this server's IP to the application's trusted IPs",
    301002: "check agent_id: the secret belongs to another application",
}
TOO_LONG = frozenset({44004, 45002})


def check(body: Mapping[str, Any], what: str) -> None:
    """Raise the typed error an `errcode` stands for; return for 0."""
    code = body.get("errcode", 0)
    if code == 0:
        return
    detail = f"{what}: errcode {code} ({body.get('errmsg', '')})"
    if code in INVALID_TOKEN:
        raise TokenRefused(detail, channel=CHANNEL)
    if code in RATE_LIMITED:
        raise RateLimited(RATE_LIMIT_WAIT_S, detail, channel=CHANNEL)
    if code in BUSY:
        raise TransientError(detail, channel=CHANNEL, suggestion="WeCom is busy")
    if isinstance(code, int) and code in CREDENTIALS:
        raise AuthError(detail, channel=CHANNEL, suggestion=CREDENTIALS[code])
    if code in TOO_LONG:
        raise MessageTooLong(detail, channel=CHANNEL)
    raise ChannelError(detail, channel=CHANNEL)


# WeCom's quiet limit: an application may send a member at most 30 messages a minute, and
# WeCom drops what is over it without an error. So the channel counts for itself: a send that
# would pass the limit is refused with `RateLimited` for exactly as long as the oldest send in
# the window needs to age out, and the retry layer waits that long and sends it then.
#: 发送应用消息: "每应用对同一个成员不可超过30次/分" (U: per member, per minute).
MAX_SENDS = 30
WINDOW_S = 60.0


@dataclass(eq=False)
class SendWindow:
    """At most `max_sends` per member in any `window_s`, for the `max_members` seen last."""

    max_sends: int = MAX_SENDS
    window_s: float = WINDOW_S
    _: KW_ONLY
    max_members: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _sent: OrderedDict[str, deque[float]] = field(
        default_factory=OrderedDict, init=False, repr=False
    )

    def reserve(self, member: str) -> float:
        """0 and the send is counted, or the seconds to wait before it may go."""
        now = self.clock()
        sent = self._sent.setdefault(member, deque())
        self._sent.move_to_end(member)
        while sent and now - sent[0] >= self.window_s:
            sent.popleft()
        if len(sent) >= self.max_sends:
            return self.window_s - (now - sent[0])
        sent.append(now)
        while len(self._sent) > self.max_members:
            self._sent.popitem(last=False)
        return 0.0


# WeCom's published send rates for an application's messages, which the manager's scheduler
# keeps every call within.
#
# WeCom server API, "访问频率限制" (https://developer.work.weixin.qq.com/document/path/90454),
# 发送应用消息频率: "每应用对同一个成员不可超过30次/分钟，1000次/小时，超过部分会被丢弃不下发"
# (each application may send one member at most 30 messages a minute; beyond that they are
# dropped, not refused), which is why this one must be kept ahead rather than learnt from refusals.
RATE_LIMITS = RateLimits(chat=Rate(30, 60.0))


log = structlog.get_logger(__name__)


class WeComChannel(RunStateChannel):
    name = CHANNEL
    rate_limits = RATE_LIMITS
    limit: ClassVar[PlatformLimit] = PLATFORM_LIMITS["wecom"]
    max_upload_bytes = MAX_FILE_BYTES

    def __init__(
        self, config: WeComConfig, *, data_dir: Path, window: SendWindow | None = None
    ) -> None:
        self._config = config
        self._media = MediaStore(data_dir, CHANNEL)
        self._window = window or SendWindow()
        self._api = WeComApi(config.api_base_url, config.corp_id, config.secret.get_secret_value())
        crypto = WeComCrypto(
            config.token.get_secret_value(),
            config.encoding_aes_key.get_secret_value(),
            config.corp_id,
        )
        self._receiver = CallbackReceiver(crypto)
        super().__init__()

    async def start(self, inbound: InboundSender) -> None:
        await self._run_state.run(self._receive(inbound))

    async def _receive(self, inbound: InboundSender) -> None:
        async def take(message: WeComMessage) -> None:
            await inbound.send(await self._with_media(message))

        # Callbacks are taken while the access token is fetched.
        self._receiver.handle = take
        try:
            await self._run_state.receive_while_checking(
                CredentialsCheck(self._api.tokens.get, "WeCom refused the credentials", CHANNEL),
                task_name="wecom-receiving",
            )
            log.info(
                "wecom.receiving",
                path=self._config.webhook_path,
                agent_id=self._config.agent_id,
            )
            await self._run_state.receive_until(name="wecom-receiving")
        finally:
            self._receiver.handle = None

    async def _with_media(self, received: WeComMessage) -> InboundMessage:
        """The message with its file fetched; a stranger's is not (the dispatcher will refuse
        the message): the kind alone stands for what was sent."""
        message = received.to_inbound()
        kind = MEDIA_KINDS.get(received.msg_type)
        if kind is None:
            return message
        if not received.media_id or not self.is_allowed(received.sender):
            return message.model_copy(update={"content": f"[{kind}]"})
        intake = self._media.intake(message, self.max_media_bytes)
        # A voice note's format is all WeCom says of its type (amr, speex).
        mime = (
            f"audio/{received.voice_format}" if kind == "audio" and received.voice_format else None
        )
        await intake.take(partial(self._fetch, received, intake.max_bytes), kind=kind, mime=mime)
        return intake.message()

    async def _fetch(self, received: WeComMessage, max_bytes: int) -> Path:
        data, content_type = await self._api.media(received.media_id, max_bytes)
        suffix = safe_suffix(f"voice.{received.voice_format}") or suffix_for(content_type)
        target = self._media.path_for(received.sender, f"{received.dedup_id}{suffix}")
        return await self._media.save(target, data)

    async def stop(self) -> None:
        self._receiver.handle = None
        await super().stop()
        await self._api.close()

    def web_routes(self) -> Sequence[web.AbstractRouteDef]:
        path = self._config.webhook_path
        return (web.get(path, self._receiver.verify_url), web.post(path, self._receiver.receive))

    async def probe(self) -> str | None:
        # Its own client: a probe neither disturbs nor outlives a running channel's session.
        config = self._config
        api = WeComApi(config.api_base_url, config.corp_id, config.secret.get_secret_value())
        try:
            await api.tokens.get()
        finally:
            await api.close()
        return f"corp {config.corp_id}, agent {config.agent_id}"

    async def send(self, message: OutboundMessage) -> None:
        if not message.content.strip():
            return
        wait_s = self._window.reserve(message.chat_id)
        if wait_s > 0:
            raise RateLimited(
                wait_s, "WeCom takes 30 messages a minute per member", channel=CHANNEL
            )
        await self._api.call("/cgi-bin/message/send", "message/send", self._payload(message))

    def _payload(self, message: OutboundMessage) -> dict[str, Any]:
        kind = "markdown" if message.metadata.get(FORMATTED) else "text"
        return {
            "touser": message.chat_id,
            "msgtype": kind,
            "agentid": self._config.agent_id,
            kind: {"content": message.content},
        }

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        await self.send(message)
        return None

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        """Upload the file, then send a message by its `media_id`; a file of 5 bytes or less
        (WeCom refuses those) goes as its link. `message/send` has no idempotency key."""
        if attachment.size < MIN_UPLOAD_BYTES:
            return await super().send_attachment(
                chat_id, attachment, reply_to=reply_to, delivery_key=delivery_key
            )
        data = await read_file(
            attachment.path,
            channel=CHANNEL,
            max_bytes=MAX_FILE_BYTES,
            limit_note="WeCom takes files up to 20 MB",
        )
        wait_s = self._window.reserve(chat_id)
        if wait_s > 0:
            raise RateLimited(
                wait_s, "WeCom takes 30 messages a minute per member", channel=CHANNEL
            )
        kind = upload_type(attachment.mime, len(data))
        media_id = await self._api.upload(kind, attachment.name, attachment.mime, data)
        payload = {
            "touser": chat_id,
            "msgtype": kind,
            "agentid": self._config.agent_id,
            kind: {"media_id": media_id},
        }
        await self._api.call("/cgi-bin/message/send", "message/send", payload)
        return None
