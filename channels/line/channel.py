"""The LINE channel: a webhook in, the Messaging API out, through line-bot-sdk v3 (async).

`start()` takes webhook requests (see `webhook.py`) until `stop()`, from the start, while it
checks the channel access token (`GET /v2/bot/info`; a refused token is fatal). Each message
event is published with its `webhookEventId` as `message_id`, and the request is answered 200
only once every event in it is durable.

Replies use the event's reply token while it is valid (free), otherwise a push with an
`X-Line-Retry-Key` derived from the reply's `delivery_id`, so a resend after a crash is not
shown twice (LINE answers a repeated key with 409: already delivered). LINE cannot edit a
message, so replies are never streamed; its loading animation shows while a turn runs. A
reply's image is an image message LINE fetches itself from the gateway's signed link, which
must be public HTTPS (`http.public_url`); other files, and images without such a link, go as
the link in text.

A reply's buttons are quick reply items on its last message: a postback action per button with
`data` (a link is a URI action). LINE tells a tap as a `postback` event carrying only that
data, so the data names the bot message too (`postback_data`); the webhook's 200 is the tap's
acknowledgement, and LINE takes the quick replies away by itself once one is tapped.

A user's edit (`messageEdited`, group chats only) or unsend of a message names LINE's message
id, while the gateway knows the message by its event id: the channel remembers that pair for
the messages it passed on lately, and an edit or delete of one names its event id (`bus.EDIT`,
`bus.DELETE`). An edit older than one already passed on (LINE may send them out of order) is
dropped.

line-bot-sdk's failures are put in the words the retry policy acts on (`line_call`): the SDK
raises `ApiException` for any non-2xx answer; 429 is a rate limit (a Retry-After, if LINE ever
sends one, is honoured), 401 a bad or revoked channel access token.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import ClassVar

import structlog
from aiohttp import web
from linebot.v3.messaging import (
    AsyncApiClient,
    AsyncMessagingApi,
    AsyncMessagingApiBlob,
    Configuration,
    ImageMessage,
    Message,
    PostbackAction,
    PushMessageRequest,
    QuickReply,
    QuickReplyItem,
    ReplyMessageRequest,
    ShowLoadingAnimationRequest,
    TextMessage,
    URIAction,
)
from linebot.v3.messaging.exceptions import ApiException, OpenApiException

from bus import (
    DELETE,
    EDIT,
    REPLY_TO,
    Attachment,
    ButtonRows,
    InboundMessage,
    InboundSender,
    OutboundMessage,
    quoted,
)
from channels.buttons import ButtonLimits, packed_tap, unpacked_tap
from channels.errors import AuthError, ChannelError, MessageTooLong, RateLimited, TransientError
from channels.lifecycle.bounded import AgedMap, InboundDedup, RecentMap
from channels.lifecycle.run_state import CredentialsCheck, RunStateChannel
from channels.line.events import LinePost
from channels.line.webhook import LineWebhook
from channels.media_files import MediaStore, safe_name, safe_suffix, save_within
from channels.media_links import link_to
from channels.outbound.delivery import delivery_uuid
from channels.retry import answers_of, platform_calls, retry_after_s
from channels.retry.pacing import Rate, RateLimits
from channels.split.limits import PLATFORM_LIMITS, PlatformLimit
from channels.web.webhook import UnreadableJson, json_payload
from config import LineConfig

CHANNEL = "line"

# LINE Messaging API reference, "Image message": `originalContentUrl` and `previewImageUrl` are
# HTTPS URLs of a JPEG or PNG, the original at most 10 MB, the preview at most 1 MB. The
# gateway has no smaller preview to offer, so an image is its own preview: up to 1 MB.
IMAGE_TYPES = frozenset({"image/jpeg", "image/png"})
MAX_IMAGE_BYTES = 1024 * 1024


class LineApiError(ChannelError):
    """A refusal re-sending cannot fix; `status` and `detail` are LINE's own."""

    def __init__(self, message: str, *, status: int, detail: str, suggestion: str = "") -> None:
        super().__init__(message, channel=CHANNEL, suggestion=suggestion)
        self.status = status
        self.detail = detail


def error_message(error: ApiException) -> str:
    """LINE's `message` (and details) from an error body; the raw text when it is not JSON."""
    body = error.body
    text = body.decode("utf-8", "replace") if isinstance(body, bytes | bytearray) else body or ""
    try:
        parsed = json_payload(text)
    except UnreadableJson:
        return text[:300]
    if not isinstance(parsed, dict):
        return text[:300]
    message = str(parsed.get("message", ""))
    details = parsed.get("details")
    if isinstance(details, list) and details:
        message += " (" + "; ".join(str(d.get("message", d)) for d in details[:3]) + ")"
    return message


def _retry_after_s(error: ApiException) -> float:
    headers = error.headers or {}
    return retry_after_s(headers.get("Retry-After") if hasattr(headers, "get") else None)


def translate(error: ApiException, what: str) -> ChannelError:
    status = int(error.status or 0)
    detail = error_message(error)
    text = f"{what}: HTTP {status}" + (f", {detail}" if detail else "")
    if status == 429:
        return RateLimited(_retry_after_s(error), text, channel=CHANNEL)
    if status in (401, 403):
        return AuthError(
            text,
            channel=CHANNEL,
            suggestion="check channel_access_token (a long-lived token from the Messaging API tab)",
        )
    if status >= 500 or status == 0:
        return TransientError(text, channel=CHANNEL, suggestion="LINE is having trouble")
    if status == 400 and "5000" in detail:
        return MessageTooLong(text, channel=CHANNEL)
    return LineApiError(text, status=status, detail=detail)


#: Messaging API calls with a deadline, raising only `channels.errors` types.
line_call = platform_calls(
    channel=CHANNEL,
    sdk_errors=(OpenApiException,),
    translate=answers_of(ApiException, translate, channel=CHANNEL),
)


# Files users send the bot, downloaded from LINE's data API (`data_api_base_url`).
#
# Images, video, audio and files are not in the webhook: their bytes are fetched with the blob
# API (`GET /v2/bot/message/{id}/content`) and saved under `{data_dir}/media/line/<chat_id>/`
# by `channels.media_files`, off the event loop. Only allowed senders' files are fetched.
log = structlog.get_logger(__name__)

#: Larger files are not kept (the SDK reads a download whole into memory).
MAX_DOWNLOAD_BYTES = 25 * 1024 * 1024
_DEFAULT_SUFFIX = {"image": ".jpg", "video": ".mp4", "audio": ".m4a", "file": ""}
#: What LINE sends of each kind (a file's type follows its name).
_MIME_TYPES = {"image": "image/jpeg", "video": "video/mp4", "audio": "audio/mp4"}


def local_path(store: MediaStore, post: LinePost) -> Path:
    suffix = safe_suffix(post.file_name) or _DEFAULT_SUFFIX.get(post.media_kind or "", "")
    chat = safe_name(post.chat_id, max_chars=None)
    name = safe_name(post.message_id, max_chars=None, fallback="")
    return store.root / chat / f"{name}{suffix}"


async def download(
    blob: AsyncMessagingApiBlob, post: LinePost, store: MediaStore, max_bytes: int
) -> str | None:
    """The saved file's path, or None when it is over `max_bytes` once read; raises
    `ChannelError` when LINE refuses it."""
    async with line_call("get_message_content", store.timeout_s):
        data = bytes(await blob.get_message_content(post.message_id))
    return await save_within(
        local_path(store, post), data, max_bytes, channel=CHANNEL, message_id=post.message_id
    )


# Reply tokens: answering with one is free, pushing costs the account's monthly quota.
#
# A message event carries a reply token that LINE accepts once, for about a minute. The channel
# keeps each one under the event's id (the inbound `message_id`, which a turn's reply names as
# `reply_to`) until it is used or too old; after a restart they are gone and replies are pushed.
#: LINE documents reply tokens as valid for one minute; this leaves time for the request.
REPLY_TOKEN_TTL_S = 50.0
#: Tokens of events not answered yet; past this many the oldest go (their replies are pushed).
MAX_TOKENS = 4096


class ReplyTokens:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._tokens: AgedMap[str, str] = AgedMap(MAX_TOKENS, REPLY_TOKEN_TTL_S, clock)

    def remember(self, event_id: str, token: str) -> None:
        self._tokens.put(event_id, token)

    def take(self, event_id: str | None) -> str | None:
        """The event's token if it is still valid; it is forgotten either way."""
        if event_id is None:
            return None
        return self._tokens.pop(event_id)

    def give_back(self, event_id: str, token: str) -> None:
        """A token a refused request did not use (a 429), for the retry."""
        self._tokens.put(event_id, token)


# LINE's published send rate, which the manager's scheduler keeps every call within.
#
# LINE Messaging API reference, "Rate limits" (https://developers.line.biz/en/reference/messaging-api/#rate-limits):
# per channel, "Other API endpoints: 2,000 requests per second", which covers the reply and push
# endpoints; past it "429 Too Many Requests".
RATE_LIMITS = RateLimits(account=Rate(2000, 1.0))


# Quick reply buttons and their taps.
#
# Messaging API reference, "Quick reply" and "Postback action"
# (https://developers.line.biz/en/reference/messaging-api/#quick-reply): at most 13 items, a
# label of at most 20 characters, a postback's `data` of at most 300 characters.
QUICK_REPLY_LIMITS = ButtonLimits(max_rows=13, max_per_row=13, max_label=20)
MAX_QUICK_REPLY_ITEMS = 13
MAX_POSTBACK_DATA = 300


def postback_data(held_id: str, data: str, label: str, sent_at: int) -> str:
    """What a button's postback carries: the bot message that held it (`held_id`, our own
    name for it: LINE tells a message's id only after it is sent), the button's data and
    label, and when it was sent. The label goes when it does not fit."""
    return packed_tap(
        {"m": held_id, "d": data, "s": sent_at, "t": label},
        droppable=("t",),
        fits=lambda packed: len(packed) <= MAX_POSTBACK_DATA,
    )


def quick_reply(buttons: ButtonRows, held_id: str) -> QuickReply | None:
    """The quick reply items of `buttons` (already fitted: labels within 20 characters)."""
    sent_at = int(time.time())
    items: list[QuickReplyItem] = []
    for button in (button for row in buttons for button in row):
        if button.url is not None and button.data is None:
            action: PostbackAction | URIAction = URIAction(label=button.text, uri=button.url)
        else:
            data = postback_data(held_id, button.data or button.text, button.text, sent_at)
            action = PostbackAction(label=button.text, data=data, displayText=button.text)
        items.append(QuickReplyItem(action=action))
    if len(items) > MAX_QUICK_REPLY_ITEMS:
        log.warning("line.quick_reply_cut", items=len(items), max_items=MAX_QUICK_REPLY_ITEMS)
    return QuickReply(items=items[:MAX_QUICK_REPLY_ITEMS]) if items else None


log = structlog.get_logger(__name__)

#: The loading animation lasts this long (5-60 s, a multiple of 5) unless a message ends it.
LOADING_SECONDS = 20
#: Shown again at most this often while a turn runs (the manager asks every few seconds).
LOADING_REFRESH_S = 15.0


class LineChannel(RunStateChannel):
    name = CHANNEL
    rate_limits = RATE_LIMITS
    limit: ClassVar[PlatformLimit] = PLATFORM_LIMITS["line"]
    buttons_shown = "in_send"
    button_limits = QUICK_REPLY_LIMITS

    def __init__(
        self, config: LineConfig, *, data_dir: Path, request_timeout_s: float = 30.0
    ) -> None:
        self._token = config.channel_access_token.get_secret_value()
        self._api_base_url = config.api_base_url.rstrip("/")
        self._data_api_base_url = config.data_api_base_url.rstrip("/")
        self._media = MediaStore(
            data_dir, CHANNEL, max_bytes=MAX_DOWNLOAD_BYTES, timeout_s=request_timeout_s
        )
        self._webhook_path = config.webhook_path
        self._timeout_s = request_timeout_s
        self.webhook = LineWebhook(config.channel_secret.get_secret_value())
        self._replies = ReplyTokens()
        self._dedup = InboundDedup(max_entries=10_000, ttl_s=3600.0)
        #: (chat, LINE message id) -> [its event id, the timestamp of its latest edit passed
        #: on], for the messages passed on lately: an edit or unsend names the LINE id.
        self._posted: RecentMap[tuple[str, str], tuple[str, int]] = RecentMap(10_000)
        #: The chats shown the loading animation in the last LOADING_REFRESH_S (bounded: a turn
        #: that never reaches `stop_typing` leaves no entry behind for long).
        self._loading_shown: AgedMap[str, None] = AgedMap(10_000, LOADING_REFRESH_S)
        self._clients: tuple[AsyncApiClient, AsyncApiClient] | None = None
        self._inbound: InboundSender | None = None
        super().__init__()

    # Clients (built inside the event loop: each owns an aiohttp session)

    def _api(self) -> AsyncMessagingApi:
        return AsyncMessagingApi(self._open_clients()[0])

    def _blob(self) -> AsyncMessagingApiBlob:
        return AsyncMessagingApiBlob(self._open_clients()[1])

    def _open_clients(self) -> tuple[AsyncApiClient, AsyncApiClient]:
        if self._clients is None:
            self._clients = (
                AsyncApiClient(Configuration(host=self._api_base_url, access_token=self._token)),
                # The blob API's default host is hard-coded; a host in its configuration wins.
                AsyncApiClient(
                    Configuration(host=self._data_api_base_url, access_token=self._token)
                ),
            )
        return self._clients

    async def _close_clients(self) -> None:
        clients, self._clients = self._clients, None
        if clients is not None:
            await asyncio.gather(*(client.close() for client in clients))

    # Lifecycle

    async def start(self, inbound: InboundSender) -> None:
        await self._run_state.run(self._receive(inbound))

    async def _receive(self, inbound: InboundSender) -> None:
        try:
            # Webhooks are taken while the token is checked.
            self._inbound = inbound
            self.webhook.take = self._take
            await self._run_state.receive_while_checking(
                CredentialsCheck(self.probe, "LINE refused the channel access token", CHANNEL),
                task_name="line-receiving",
            )
            log.info("line.receiving", path=self._webhook_path)
            await self._run_state.receive_until(name="line-receiving")
        finally:
            self.webhook.take = None
            self._inbound = None
            await asyncio.shield(self._close_clients())

    async def stop(self) -> None:
        await super().stop()
        await self._close_clients()

    async def probe(self) -> str | None:
        async with self._probing(self._close_clients), line_call("get_bot_info", self._timeout_s):
            info = await self._api().get_bot_info()
        return f"{info.display_name} ({info.basic_id}, {info.user_id})"

    def web_routes(self) -> list[web.RouteDef]:
        return [web.post(self._webhook_path, self.webhook.handle_request)]

    # Inbound

    async def _take(self, posts: list[LinePost]) -> None:
        """Publish a request's events in order; returns once all are durable."""
        inbound = self._inbound
        if inbound is None:
            raise RuntimeError("the LINE channel is not receiving")
        for post in posts:
            if post.event_id in self._dedup:
                log.debug("line.duplicate_event", event_id=post.event_id)
                continue
            message = await self._to_inbound(post)
            if post.edited or post.unsent:
                change = self._named_original(post, message)
                if change is None:
                    continue
                message = change
            elif post.postback_data is None:
                self._posted.remember((post.chat_id, post.message_id), (post.event_id, 0))
            await inbound.send(message)
            self._dedup.seen(post.event_id)
            if post.reply_token and not post.is_redelivery:
                self._replies.remember(post.event_id, post.reply_token)

    def _named_original(self, post: LinePost, message: InboundMessage) -> InboundMessage | None:
        """The edit or delete `message` naming the original by its event id where it is known
        (otherwise by LINE's id, which names no waiting message); None for a stale edit."""
        key = (post.chat_id, post.message_id)
        original, latest_edit_ms = self._posted.get(key, (post.message_id, 0))
        if post.unsent:
            return message.model_copy(
                update={
                    "message_id": f"{original}:delete",
                    "metadata": {DELETE: {"message_id": original}},
                }
            )
        if post.timestamp_ms < latest_edit_ms:
            log.info("line.stale_edit_dropped", event_id=post.event_id, message_id=original)
            return None
        if key in self._posted:
            self._posted.remember(key, (original, post.timestamp_ms))
        metadata = {**message.metadata, EDIT: {"message_id": original}}
        return message.model_copy(
            update={"message_id": f"{original}:edit:{post.event_id}", "metadata": metadata}
        )

    async def _to_inbound(self, post: LinePost) -> InboundMessage:
        # A stranger's files are not fetched (the dispatcher will refuse the message): the
        # kind alone stands for what was sent.
        fetched = post.media_kind is not None and self.is_allowed(post.sender_id)
        content = post.text or (f"[{post.media_kind}]" if post.media_kind and not fetched else "")
        metadata = _metadata(post)
        if post.postback_data is not None:
            tap = unpacked_tap(post.postback_data)
            content = tap.label
            metadata.update(tap.metadata())
        message = InboundMessage(
            channel=CHANNEL,
            sender_id=post.sender_id,
            chat_id=post.chat_id,
            content=content,
            timestamp=post.sent_at,
            message_id=post.event_id,
            metadata=metadata,
        )
        if not fetched:
            return message
        intake = self._media.intake(message, self.max_media_bytes)
        fetch = partial(download, self._blob(), post, self._media, intake.max_bytes)
        await intake.take(
            fetch,
            name=post.file_name,
            mime=_MIME_TYPES.get(post.media_kind or ""),
            kind="file" if post.media_kind == "file" else None,
            size=post.file_size,
            duration_s=post.duration_s,
        )
        return intake.message()

    # Outbound

    async def send(self, message: OutboundMessage) -> None:
        if message.media:
            log.warning("line.media_not_sent", chat_id=message.chat_id, files=len(message.media))
        if not message.content.strip():
            return
        text = TextMessage(text=message.content)
        if message.buttons:
            # The resend of a part names the same message (its delivery id), so a tap on
            # either copy is one tap.
            held_id = message.delivery_id or uuid.uuid4().hex
            text.quick_reply = quick_reply(message.buttons, held_id)
        token = self._replies.take(message.reply_to)
        replied = (
            token is not None
            and message.reply_to is not None
            and await self._reply(message.reply_to, token, text)
        )
        if replied:
            return
        await self._push(message, text)

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        """An image message by the gateway's public HTTPS link (LINE fetches it); a file LINE
        has no message for, a larger image or no such link: the default, the link as text."""
        url = link_to(attachment, self.media_links)
        if (
            url is None
            or not url.startswith("https://")
            or attachment.mime not in IMAGE_TYPES
            or attachment.size > MAX_IMAGE_BYTES
        ):
            return await super().send_attachment(
                chat_id, attachment, reply_to=reply_to, delivery_key=delivery_key
            )
        image = ImageMessage(originalContentUrl=url, previewImageUrl=url)
        carrier = OutboundMessage(
            channel=self.name, chat_id=chat_id, content="", delivery_id=delivery_key
        )
        await self._push(carrier, image)
        return None

    async def _reply(self, event_id: str, token: str, text: TextMessage) -> bool:
        """True once sent; False when LINE no longer takes the token (then push)."""
        request = ReplyMessageRequest(replyToken=token, messages=[text])
        try:
            async with line_call("reply_message", self._timeout_s):
                await self._api().reply_message(request)
        except RateLimited:
            self._replies.give_back(event_id, token)
            raise
        except LineApiError as error:
            if error.status != 400:
                raise
            log.info("line.reply_token_refused", event_id=event_id, error=error.detail)
            return False
        return True

    async def _push(self, message: OutboundMessage, sent: Message) -> None:
        request = PushMessageRequest(to=message.chat_id, messages=[sent])
        try:
            async with line_call("push_message", self._timeout_s):
                await self._api().push_message(request, x_line_retry_key=delivery_uuid(message))
        except LineApiError as error:
            if error.status != 409:
                raise
            # The retry key was accepted before: this part was delivered already.
            log.info("line.push_already_accepted", chat_id=message.chat_id)

    async def send_typing(self, chat_id: str) -> None:
        # LINE shows the loading animation only in one-on-one chats (user ids start with U).
        if not chat_id.startswith("U"):
            return
        if chat_id in self._loading_shown:
            return
        self._loading_shown.put(chat_id, None)
        request = ShowLoadingAnimationRequest(chatId=chat_id, loadingSeconds=LOADING_SECONDS)
        async with line_call("show_loading_animation", self._timeout_s):
            await self._api().show_loading_animation(request)

    async def stop_typing(self, chat_id: str) -> None:
        # The animation ends by itself when the reply arrives.
        self._loading_shown.pop(chat_id)


def _metadata(post: LinePost) -> dict[str, object]:
    metadata: dict[str, object] = {
        "line_message_id": post.message_id,
        "is_redelivery": post.is_redelivery,
    }
    if post.quoted_message_id is not None:
        # LINE names the quoted message only; whose it was is not told either.
        metadata[REPLY_TO] = quoted(post.quoted_message_id, None, from_bot=False)
    return metadata
