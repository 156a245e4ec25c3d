"""The WeCom AI bot channel (企业微信智能机器人): a websocket the bot opens to WeCom.

`start()` connects to `ws_url`, subscribes with the bot id and secret (a refusal is fatal),
then reads callbacks until stopped, reconnecting with exponential backoff when the connection
drops. Callbacks are queued by the reader and published, one at a time in arrival order, by the
inbound pump; a message counts as handled (remembered for dedup) only once `inbound.send`
returned, i.e. once it is durable. The protocol has no acknowledgement of callbacks by the
client, so that is all "acknowledging" means here.

Replies answer the callback's `req_id` with streamed `aibot_respond_msg` frames (the whole text
so far each time, `finish` on the last), each frame sent only after the previous one for that
`req_id` was acknowledged. What cannot answer a callback (see `ReplyBook` below) is sent with
`aibot_send_msg` as Markdown, split to that message's smaller limit.

A reply's buttons are a button interaction template card (`frames.button_card`), shown by
`send` itself: a short reply is the card's title, a longer one goes first as any reply does and
the card follows it. A tap (`template_card_event`) is published as a message of the chat whose
content is the button's text, with `bus.CALLBACK` naming the card by its `task_id`; once it is
durable, the card is replaced by one showing the chosen button alone (`frames.used_card`), on
the event's own `req_id` within WeCom's five seconds, by the card updater beside the pump.

An allowed user's image, file or video is downloaded and decrypted (`frames.decrypt_media`)
before its message is published (`channels.media_files.MediaIntake`), into
`{data_dir}/media/wecom-bot/<chat_id>/`; WeCom states no size, so a download stops at the limit.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import ClassVar

import aiohttp
import structlog

from bus import InboundMessage, InboundSender, OutboundMessage, PipeClosed
from channels.buttons import ButtonLimits, tap_metadata
from channels.errors import ChannelError, FatalChannelError, TransientError
from channels.health import ChannelHealth
from channels.lifecycle.bounded import InboundDedup, RecentMap
from channels.lifecycle.reconnect import reconnecting
from channels.lifecycle.run_state import RunStateChannel
from channels.media_files import MediaStore, safe_file_name
from channels.media_info import too_large_reason
from channels.split import split_message
from channels.split.limits import PLATFORM_LIMITS, PlatformLimit
from channels.stopping import until_taken
from channels.web.client import LazySession
from channels.wecom_bot import frames
from channels.wecom_bot.connection import CHANNEL, AibotConnection, WecomBotTimeouts
from channels.wecom_bot.frames import (
    Callback,
    CardTap,
    Frame,
    MalformedFrame,
    MediaRef,
    PressedButton,
)
from config import WecomBotConfig

# Which callback a reply answers, and whether its `req_id` can still carry it.
#
# A reply to a user's message goes out as `aibot_respond_msg` frames with that message's
# `req_id`: one streamed message per callback, within the platform's reply window. Everything
# else the bot says (a second message of a long reply, a reply whose window has passed, a reply
# after a restart, when the `req_id` is no longer known) is sent of the bot's own accord with
# `aibot_send_msg`. Concurrent turns each answer their own callback, so nothing is shared per
# chat (octos kept one `req_id` per chat and mis-routed concurrent replies).
#: How long a callback's `req_id` takes replies. WeCom ends a stream the bot has not finished
#: six minutes after the user's message; five leaves room for the last frames.
REPLY_WINDOW_S = 300.0


@dataclass(slots=True)
class PendingCallback:
    req_id: str
    chat_id: str
    received_at: float
    #: A streamed message has been started on this `req_id`; it carries no second one.
    used: bool = False


@dataclass(frozen=True, slots=True)
class OpenStream:
    req_id: str
    chat_id: str


class ReplyBook:
    """Callbacks awaiting their reply and streams being shown, bounded in size and age."""

    # A RecentMap, not an AgedMap of expiring entries: `available` checks the window itself,
    # since a callback past its window must stop the search, which an expired entry could not.
    def __init__(
        self,
        *,
        window_s: float = REPLY_WINDOW_S,
        capacity: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window_s = window_s
        self._clock = clock
        self._callbacks: RecentMap[str, PendingCallback] = RecentMap(capacity)
        self._streams: RecentMap[str, OpenStream] = RecentMap(capacity)
        self._finished: RecentMap[str, None] = RecentMap(capacity)

    def received(self, msg_id: str, req_id: str, chat_id: str) -> None:
        self._callbacks.remember(msg_id, PendingCallback(req_id, chat_id, self._clock()))

    def available(self, msg_ids: Iterable[str], chat_id: str) -> tuple[str, str] | None:
        """(msg_id, req_id) of the callback a new streamed message may answer, if any.

        Marked used only by `use`, once its first frame was acknowledged: a frame the retry
        layer sends again (after a rate limit) still finds the callback free."""
        now = self._clock()
        for msg_id in msg_ids:
            pending = self._callbacks.get(msg_id)
            if pending is None or pending.chat_id != chat_id:
                continue
            if pending.used or now - pending.received_at > self._window_s:
                return None
            return msg_id, pending.req_id
        return None

    def use(self, msg_id: str) -> None:
        pending = self._callbacks.get(msg_id)
        if pending is not None:
            pending.used = True

    def open_stream(self, stream_id: str, req_id: str, chat_id: str) -> None:
        self._streams.remember(stream_id, OpenStream(req_id, chat_id))

    def stream(self, stream_id: str) -> OpenStream | None:
        return self._streams.get(stream_id)

    def close_stream(self, stream_id: str) -> None:
        if self._streams.pop(stream_id, None) is not None:
            self._finished.remember(stream_id, None)

    def finished(self, stream_id: str) -> bool:
        """Whether the stream was finished here: a snapshot of it shown late changes nothing."""
        return stream_id in self._finished


log = structlog.get_logger(__name__)

#: What an image's first bytes say it is: the download's own type says nothing (it is encrypted).
_IMAGE_SUFFIXES = {b"\xff\xd8\xff": ".jpg", b"\x89PNG": ".png", b"GIF8": ".gif", b"RIFF": ".webp"}
#: AES-CBC padding adds at most one 32-byte block to a file.
_PADDING_BYTES = 32

#: The waits of a channel no test shortened.
DEFAULT_TIMEOUTS = WecomBotTimeouts()

#: A stream frame's `content` may hold at most 20,480 bytes (UTF-8).
STREAM_LIMIT = PLATFORM_LIMITS["wecom-bot"]
#: A Markdown message sent of the bot's own accord: WeCom's Markdown limit, 4,096 bytes.
MARKDOWN_LIMIT = PlatformLimit(4_096, "bytes")
#: A card's buttons are one list of at most six (`frames.button_card` keeps the first six
#: tappable ones); a label is cut to WeCom's recommended ten characters.
CARD_BUTTON_LIMITS = ButtonLimits(
    max_rows=frames.CARD_MAX_BUTTONS,
    max_per_row=frames.CARD_MAX_BUTTONS,
    max_label=frames.BUTTON_TEXT_MAX,
)


class WecomBotChannel(RunStateChannel):
    name = CHANNEL
    limit: ClassVar[PlatformLimit] = STREAM_LIMIT
    #: `send_with_id` opens a streamed message on a callback, or sends nothing.
    send_with_id_sends_whole: ClassVar[bool] = False
    #: Each frame waits for its acknowledgement anyway; half a second keeps a stream lively.
    edit_interval_s: ClassVar[float] = 0.5
    #: `send` shows a reply's buttons as a template card, and replaces the card once tapped.
    buttons_shown = "in_send"
    button_limits = CARD_BUTTON_LIMITS

    def __init__(
        self,
        config: WecomBotConfig,
        *,
        data_dir: Path,
        timeouts: WecomBotTimeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self._media = MediaStore(data_dir, CHANNEL)
        self._downloads = LazySession()
        self._bot_id = config.bot_id
        self._secret = config.secret.get_secret_value()
        self._ws_url = config.ws_url
        self._timeouts = timeouts
        self._book = ReplyBook()
        self._dedup = InboundDedup(max_entries=10_000, ttl_s=24 * 3600.0)
        self._received: asyncio.Queue[Frame] = asyncio.Queue(maxsize=256)
        #: Taps whose card is to be replaced, durable already; the updater's work.
        self._card_updates: asyncio.Queue[CardTap] = asyncio.Queue(maxsize=256)
        #: The first tap on each card answered here (the tapped button, its key): a later
        #: tap on the card shows that choice again, not its own.
        self._used_cards: RecentMap[str, tuple[PressedButton, str]] = RecentMap(10_000)
        #: The reply parts (delivery ids) whose text went out before their card: a retry of
        #: the part sends only the card.
        self._texts_out: RecentMap[str, None] = RecentMap(10_000)
        self._connection: AibotConnection | None = None
        # Receiving while subscribed.
        super().__init__(not_receiving=ChannelHealth.degraded("not connected to WeCom"))

    # -- receiving --------------------------------------------------------------------------

    async def start(self, inbound: InboundSender) -> None:
        # Cancelled by `stop()`: a connection still subscribing is closed as one that reads.
        await self._run_state.run_until_stopped(self._receive(inbound), name="wecom-bot:receive")

    async def _receive(self, inbound: InboundSender) -> None:
        async with aiohttp.ClientSession() as http:
            # Not a TaskGroup: a FatalChannelError must reach the supervisor as itself.
            pump = asyncio.create_task(self._pump(inbound), name="wecom-bot:inbound-pump")
            updater = asyncio.create_task(self._update_cards(), name="wecom-bot:card-updater")
            try:
                await self._connect_until_stopped(http)
            finally:
                pump.cancel()
                updater.cancel()
                await asyncio.gather(pump, updater, return_exceptions=True)

    async def _connect_until_stopped(self, http: aiohttp.ClientSession) -> None:
        await reconnecting(
            lambda: self._session(http),
            self._run_state.stopping,
            channel=CHANNEL,
            failed_event="wecom_bot.connection_failed",
            policy=self._timeouts.reconnect,
        )

    async def _session(self, http: aiohttp.ClientSession) -> None:
        connection = await AibotConnection.open(http, self._ws_url, self._timeouts)
        try:
            await connection.subscribe(self._bot_id, self._secret)
            self._connection = connection
            self._run_state.receiving.set()
            log.info("wecom_bot.subscribed", bot_id=self._bot_id)
            await connection.run(self._take)
        finally:
            self._run_state.receiving.clear()
            self._connection = None
            await connection.close()
        log.info("wecom_bot.disconnected")

    async def _take(self, frame: Frame) -> None:
        """The reader's hand-off: frames are published by the pump, in order. Of the events,
        only a card's tap is passed on."""
        if frame.cmd == frames.EVENT_CALLBACK:
            kind = frames.event_type(frame)
            if kind == frames.DISCONNECTED_EVENT:
                log.error("wecom_bot.replaced_by_another_connection", bot_id=self._bot_id)
                raise FatalChannelError(
                    "WeCom closed this connection: another one subscribed with this bot id",
                    channel=CHANNEL,
                    suggestion="run one gateway (one profile) per WeCom AI bot",
                )
            if kind != frames.TEMPLATE_CARD_EVENT:
                return
        await self._received.put(frame)

    async def _pump(self, inbound: InboundSender) -> None:
        while True:
            frame = await self._received.get()
            try:
                if frame.cmd == frames.EVENT_CALLBACK:
                    await self._publish_tap(inbound, frames.parse_card_tap(frame))
                else:
                    await self._publish(inbound, frames.parse_callback(frame))
            except MalformedFrame as exc:
                log.warning("wecom_bot.malformed_callback_skipped", error=str(exc))

    async def _publish(self, inbound: InboundSender, callback: Callback) -> None:
        key = f"{callback.chat_id}:{callback.msg_id}"
        if key in self._dedup:
            log.info("wecom_bot.duplicate_skipped", msg_id=callback.msg_id)
            return
        if not callback.text.strip() and not callback.media:
            log.info("wecom_bot.unsupported_message_skipped", msg_type=callback.msg_type)
            return
        message = await self._with_media(
            callback,
            InboundMessage(
                channel=CHANNEL,
                sender_id=callback.sender_id,
                chat_id=callback.chat_id,
                content=callback.text,
                message_id=callback.msg_id,
                metadata={"chat_type": callback.chat_type},
            ),
        )
        # Known before publishing: the reply may come back before `send` returns.
        self._book.received(callback.msg_id, callback.req_id, callback.chat_id)
        try:
            await until_taken(lambda: inbound.send(message), event="wecom_bot.inbound_refused")
        except PipeClosed:
            return
        self._dedup.seen(key)

    async def _publish_tap(self, inbound: InboundSender, tap: CardTap) -> None:
        """A tap as a message of its chat, once per event id; then, the tap durable, its card
        is queued for replacing. A stranger's tap (the dispatcher refuses it) leaves the card
        as it is."""
        key = f"{tap.chat_id}:{tap.msg_id}"
        if key in self._dedup:
            log.info("wecom_bot.duplicate_skipped", msg_id=tap.msg_id)
            return
        pressed = frames.pressed_button(tap.event_key)
        metadata = {
            "chat_type": tap.chat_type,
            **tap_metadata(pressed.data, tap.task_id, pressed.sent_at),
        }
        message = InboundMessage(
            channel=CHANNEL,
            sender_id=tap.sender_id,
            chat_id=tap.chat_id,
            content=pressed.label,
            message_id=tap.msg_id,
            metadata=metadata,
        )
        try:
            await until_taken(lambda: inbound.send(message), event="wecom_bot.inbound_refused")
        except PipeClosed:
            return
        self._dedup.seen(key)
        if not self.is_allowed(tap.sender_id):
            return
        try:
            self._card_updates.put_nowait(tap)
        except asyncio.QueueFull:
            log.warning("wecom_bot.card_not_updated", task_id=tap.task_id, reason="queue full")

    async def _update_cards(self) -> None:
        """Replace each tapped card, in the order of the taps. WeCom takes the update only
        within five seconds of the tap, so a failure is logged, not tried again."""
        while True:
            tap = await self._card_updates.get()
            # A card tapped before shows its first choice again, whichever button this was.
            first = self._used_cards.get(tap.task_id)
            if first is None:
                first = (frames.pressed_button(tap.event_key), tap.event_key)
                self._used_cards.remember(tap.task_id, first)
            pressed, key = first
            update = frames.card_update(tap.req_id, frames.used_card(tap.task_id, pressed, key))
            try:
                await self._live().respond(tap.req_id, update, cmd=frames.UPDATE_CARD)
            except ChannelError as error:
                log.warning("wecom_bot.card_not_updated", task_id=tap.task_id, error=str(error))
            except Exception as error:
                # Supervision point (per card): one update's bug must not end the updater.
                log.error(
                    "wecom_bot.card_update_failed",
                    task_id=tap.task_id,
                    error=f"{type(error).__name__}: {error}",
                    exc_info=error,
                )

    async def _with_media(self, callback: Callback, message: InboundMessage) -> InboundMessage:
        """The message with its files downloaded; a stranger's are not (the dispatcher will
        refuse the message): their kinds alone stand for what was sent."""
        if not callback.media:
            return message
        if not self.is_allowed(callback.sender_id):
            kinds = [f"[{ref.kind}]" for ref in callback.media]
            content = " ".join(part for part in (message.content, *kinds) if part)
            return message.model_copy(update={"content": content})
        intake = self._media.intake(message, self.max_media_bytes)
        for number, ref in enumerate(callback.media):
            name = f"{callback.msg_id}_{number}"
            fetch = partial(self._download, ref, callback.chat_id, name, intake.max_bytes)
            await intake.take(fetch, kind=ref.kind)
        return intake.message()

    async def _download(self, ref: MediaRef, chat_id: str, name: str, max_bytes: int) -> Path:
        """Fetch and decrypt one file, named by the download's own file name where it gives
        one; `ChannelError` when it cannot be had."""
        try:
            async with self._downloads.get().get(ref.url) as response:
                if response.status != 200:
                    raise ChannelError(
                        f"the download answered HTTP {response.status}", channel=CHANNEL
                    )
                sealed = bytearray()
                async for block in response.content.iter_chunked(64 * 1024):
                    sealed.extend(block)
                    if len(sealed) > max_bytes + _PADDING_BYTES:
                        raise ChannelError(too_large_reason(max_bytes), channel=CHANNEL)
                disposition = response.content_disposition
                filename = disposition.filename if disposition is not None else None
        except (aiohttp.ClientError, OSError) as error:
            raise ChannelError(f"the download failed: {error!r}", channel=CHANNEL) from error
        try:
            data = frames.decrypt_media(bytes(sealed), ref.aeskey)
        except ValueError as error:
            raise ChannelError(f"the file does not decrypt: {error}", channel=CHANNEL) from error
        if len(data) > max_bytes:
            raise ChannelError(too_large_reason(max_bytes), channel=CHANNEL)
        if filename:
            name = f"{name}_{safe_file_name(filename)}"
        elif ref.kind == "image":
            name += next((s for magic, s in _IMAGE_SUFFIXES.items() if data.startswith(magic)), "")
        elif ref.kind == "video":
            name += ".mp4"
        return await self._media.save(self._media.path_for(chat_id, name), data)

    async def stop(self) -> None:
        await super().stop()
        await self._downloads.close()

    # -- sending ----------------------------------------------------------------------------

    def _live(self) -> AibotConnection:
        connection = self._connection
        if connection is None or connection.closed:
            raise TransientError("not connected to WeCom", channel=CHANNEL)
        return connection

    def supports_edit(self) -> bool:
        return True

    async def send(self, message: OutboundMessage) -> None:
        if message.buttons:
            await self._send_with_card(message)
            return
        if not message.content.strip():
            # Media would need WeCom's chunked upload first; not built yet.
            log.warning("wecom_bot.media_not_sent", chat_id=message.chat_id)
            return
        await self._send_text(message, message.content)

    async def _send_text(self, message: OutboundMessage, content: str) -> None:
        """`content` as the reply `message`: the end of the stream this part opened (shown
        growing before its buttons came), else the answer to its callback, else a message of
        the bot's own."""
        part = message.delivery_id
        if part is not None and self._book.stream(part) is not None:
            await self.finish_stream(message.chat_id, part, content)
            return
        callback = self._book.available(message.answered_ids(), message.chat_id)
        if callback is None:
            await self._send_own(message.chat_id, content)
            return
        msg_id, req_id = callback
        stream_id = part or uuid.uuid4().hex
        await self._live().respond(
            req_id, frames.stream_reply(req_id, stream_id, content, finish=True)
        )
        self._book.use(msg_id)

    async def _send_with_card(self, message: OutboundMessage) -> None:
        """The reply's text, where the card's title does not show it all (or a stream showed
        it growing), then its buttons' card: the answer to the callback where the text left
        it free, else a message of the bot's own."""
        shown = frames.button_card(
            message.content,
            message.buttons,
            task_id=frames.task_id_for(message.delivery_id),
            sent_at=int(time.time()),
        )
        part = message.delivery_id
        text = shown.text_before
        if text is None and part is not None and self._book.stream(part) is not None:
            text = message.content
        if text is not None and (part is None or part not in self._texts_out):
            await self._send_text(message, text)
            if part is not None:
                self._texts_out.remember(part, None)
        if shown.card is None:
            return
        callback = self._book.available(message.answered_ids(), message.chat_id)
        if callback is None:
            req_id, frame = frames.card_message(message.chat_id, shown.card)
            await self._live().send(req_id, frame)
            return
        msg_id, req_id = callback
        await self._live().respond(req_id, frames.card_reply(req_id, shown.card))
        self._book.use(msg_id)

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        """Open a streamed message on the callback's `req_id`. When there is none, send nothing
        and return None: the manager then sends the rest of the reply, from here on, as
        whole messages once it is final."""
        callback = self._book.available(message.answered_ids(), message.chat_id)
        if callback is None:
            return None
        msg_id, req_id = callback
        stream_id = message.delivery_id or uuid.uuid4().hex
        await self._live().respond(
            req_id, frames.stream_reply(req_id, stream_id, message.content, finish=False)
        )
        self._book.use(msg_id)
        self._book.open_stream(stream_id, req_id, message.chat_id)
        return stream_id

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        await self._stream_frame(message_id, content, finish=False)

    async def finish_stream(self, chat_id: str, message_id: str, content: str) -> None:
        await self._stream_frame(message_id, content, finish=True)
        self._book.close_stream(message_id)

    async def _stream_frame(self, stream_id: str, content: str, *, finish: bool) -> None:
        stream = self._book.stream(stream_id)
        if stream is None and self._book.finished(stream_id):
            # Finished by `send` with its buttons' card: the final text is already shown.
            log.debug("wecom_bot.finished_stream_not_edited", stream_id=stream_id)
            return
        if stream is None:
            raise TransientError(f"no open stream {stream_id}", channel=CHANNEL)
        frame = frames.stream_reply(stream.req_id, stream_id, content, finish=finish)
        await self._live().respond(stream.req_id, frame)

    async def _send_own(self, chat_id: str, content: str) -> None:
        connection = self._live()
        for piece in split_message(content, MARKDOWN_LIMIT, max_chunks=None):
            req_id, frame = frames.markdown_message(chat_id, piece)
            await connection.send(req_id, frame)

    async def probe(self) -> str | None:
        """Subscribe once and leave. WeCom keeps one connection per bot, so a probe while a
        gateway serves the bot takes the connection over from it."""
        async with aiohttp.ClientSession() as http:
            connection = await AibotConnection.open(http, self._ws_url, self._timeouts)
            try:
                await connection.subscribe(self._bot_id, self._secret)
            finally:
                await connection.close()
        return f"WeCom AI bot {self._bot_id}"
