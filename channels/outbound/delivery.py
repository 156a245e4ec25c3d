"""Outbound delivery: a reply fitted to the channel (`fit_chunks`), sent under the one retry
policy, each chunk re-sent as plain text when the platform rejects its markup, then the reply's
files (`send_attachments`), each checked against the platform's size limit first. A whole
reply's send reports the platform ids of the messages it made, where the channel gives them
(`Channel.send_with_id_sends_whole`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from bus import (
    REACTION,
    REACTION_TEXT_MAX,
    Attachment,
    InboundMessage,
    OutboundMessage,
    reaction_note,
)
from channels.base import FORMATTED, Channel
from channels.errors import DeliveryError, FormattingRejected
from channels.media_info import human_size
from channels.metrics import ChannelMetrics
from channels.retry import Reason, Retrier
from channels.retry.pacing import Priority
from channels.split import MAX_CHUNKS, split_rendered

# Fitting a reply to a channel: the one function delivery and stream editing both call.
#
# The text is split raw (the splitter, `channels.split`, knows Markdown) and each chunk rendered
# with the channel's `format_outbound`; the splitter measures each chunk's rendering and fills it
# as far as the limit allows (`split_rendered`), so the limit holds for what the platform
# receives, measured in the platform's own unit, and no chunk is left short because its markup
# grew it.
log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One message's worth of a reply: the agent's text and what the platform is sent."""

    raw: str
    formatted: str

    @classmethod
    def rendered(cls, channel: Channel, raw: str) -> Chunk:
        return cls(raw, channel.format_outbound(raw))

    @property
    def is_formatted(self) -> bool:
        return self.formatted != self.raw


#: Only a text at most this many times the limit is rendered whole to see if it fits as is:
#: markup never shrinks a text that much, and rendering a huge reply twice is wasted work.
_WHOLE_RENDER_MAX_FACTOR = 2


def fit_chunks(channel: Channel, text: str, *, max_chunks: int | None = MAX_CHUNKS) -> list[Chunk]:
    """`text` in chunks whose formatted form fits `channel.limit`, in order.

    With `max_chunks` (None: no cap; a streamed message rolls over instead) the splitter ends
    with a truncation notice past that many chunks, or past the channel's `max_reply_messages`.
    """
    if len(text) <= _WHOLE_RENDER_MAX_FACTOR * channel.limit.max_units:
        # Markup can shrink a text (Slack's `*bold*` for `**bold**`): what fits once rendered
        # is one message, even when the agent's text alone would not.
        whole = Chunk.rendered(channel, text)
        if text.strip() and channel.limit.fits(whole.formatted):
            return [whole]
    if max_chunks is not None and channel.max_reply_messages is not None:
        # Room for the truncation notice the splitter adds past the cap.
        max_chunks = max(1, min(max_chunks, channel.max_reply_messages - 1))
    chunks: list[Chunk] = []
    for raw, formatted in split_rendered(
        text, channel.limit, channel.format_outbound, max_chunks=max_chunks
    ):
        if not channel.limit.fits(formatted):
            log.warning(
                "delivery.chunk_does_not_fit",
                channel=channel.name,
                measured=channel.limit.measure(formatted),
                limit=channel.limit.max_units,
            )
        chunks.append(Chunk(raw, formatted))
    return chunks


T = TypeVar("T")


def chunk_message(
    template: OutboundMessage,
    chunk: Chunk,
    *,
    reply_to: str | None,
    part: int = 0,
    last: bool = True,
) -> OutboundMessage:
    """A copy of `template` carrying one chunk, flagged when it went through formatting.

    `part` numbers the platform messages of one reply: the chunk's `delivery_id` is the
    reply's with `.part` appended, the same on every resend of that part. Only the `last`
    chunk keeps the reply's buttons (a channel that sends them with the text shows them once,
    under the end of the reply).
    """
    metadata = {key: value for key, value in template.metadata.items() if key != FORMATTED}
    if chunk.is_formatted:
        metadata[FORMATTED] = True
    delivery_id = template.delivery_id
    # Made anew from the reply's fields rather than `model_copy(update=...)`: a chunk a reply,
    # and pydantic-core's validation costs less than the copy's Python (`__copy__`, three
    # `copy.copy`); every field the reply has is carried, as a copy would.
    return OutboundMessage(
        **{
            **template.__dict__,
            "content": chunk.formatted,
            "reply_to": reply_to,
            "metadata": metadata,
            "delivery_id": None if delivery_id is None else f"{delivery_id}.{part}",
            "buttons": template.buttons if last else [],
        }
    )


async def _sent_without_id(channel: Channel, message: OutboundMessage) -> str | None:
    await channel.send(message)
    return None


def _whole_send(channel: Channel) -> Callable[[OutboundMessage], Awaitable[str | None]]:
    """How `channel` sends a whole message and tells its id: `send_with_id` where that is the
    same send (most platforms), else `send`, which tells none."""
    if channel.send_with_id_sends_whole:
        return channel.send_with_id
    return functools.partial(_sent_without_id, channel)


class SentTexts:
    """The start of each message this process sent, by channel, chat and platform id: what a
    user's reaction to it quotes, where the platform's reaction event names only the message.
    The oldest are forgotten first; a message sent before a restart is not known."""

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._texts: OrderedDict[tuple[str, str, str], str] = OrderedDict()

    def note(self, channel: str, chat_id: str, message_id: str, text: str) -> None:
        key = (channel, chat_id, message_id)
        self._texts[key] = text[:REACTION_TEXT_MAX]
        self._texts.move_to_end(key)
        if len(self._texts) > self._capacity:
            self._texts.popitem(last=False)

    def quoted(self, message: InboundMessage) -> InboundMessage:
        """`message`, and when it is a reaction to a message whose text the platform did not
        tell and this process sent, with that text quoted."""
        reaction = message.metadata.get(REACTION)
        if not isinstance(reaction, dict):
            return message
        emoji, reacted = str(reaction.get("emoji", "")), str(reaction.get("message_id", ""))
        if message.content != reaction_note(emoji, None):
            return message
        text = self._texts.get((message.channel, message.chat_id, reacted))
        if not text:
            return message
        return message.model_copy(update={"content": reaction_note(emoji, text)})


class Delivery:
    """Sends, edits and finishes messages on a channel with the retry policy and metrics."""

    def __init__(self, retrier: Retrier, metrics: ChannelMetrics) -> None:
        self.retrier = retrier
        self.metrics = metrics
        self.sent = SentTexts()

    async def send_message(self, channel: Channel, message: OutboundMessage) -> list[str]:
        """A whole reply: media as is, text split to the limit; the first failure stops it.
        The platform ids of the messages sent, in order (none where the channel gives none).

        An empty reply is still the answer (a request to the HTTP API waits for it), so the
        channel gets it as is, unsplit; text of blanks alone has nothing to split and is skipped.
        """
        if message.media or not message.content:
            return await self.send_whole(channel, message)
        return await self.send_chunks(channel, message, fit_chunks(channel, message.content))

    async def send_whole(self, channel: Channel, message: OutboundMessage) -> list[str]:
        """`message` as it is, unsplit, in one call (its files too, where the channel takes
        them with the text)."""
        sent = await self.retrier.call(
            functools.partial(_whole_send(channel), message),
            channel=channel.name,
            chat_id=message.chat_id,
            action="send",
        )
        self.metrics.message_sent(channel.name)
        if sent is None:
            return []
        self.sent.note(channel.name, message.chat_id, sent, message.content)
        return [sent]

    async def send_attachments(self, channel: Channel, reply: OutboundMessage) -> list[str]:
        """Each file of `reply` as its own message (`Channel.send_attachment`), in order; one
        over the platform's limit is not sent, and the chat is told so instead. The platform
        ids of the messages sent."""
        ids: list[str] = []
        for number, attachment in enumerate(reply.attachments, start=1):
            key = attachment_key(reply, number)
            notice = await _notice_instead(channel, reply, attachment)
            if notice is not None:
                ids.extend(await self.send_message(channel, notice_for(reply, notice, key)))
                continue
            sent = await self.retrier.call(
                functools.partial(
                    channel.send_attachment,
                    reply.chat_id,
                    attachment,
                    reply_to=reply.reply_to,
                    delivery_key=key,
                ),
                channel=channel.name,
                chat_id=reply.chat_id,
                action="send_file",
            )
            self.metrics.message_sent(channel.name)
            if sent is not None:
                ids.append(sent)
        return ids

    async def send_chunks(
        self, channel: Channel, template: OutboundMessage, chunks: list[Chunk]
    ) -> list[str]:
        """Each chunk as its own message; only the reply's first message keeps `reply_to`.
        The platform ids of the messages sent (where the channel gives them)."""
        ids = []
        send = _whole_send(channel)
        for index, chunk in enumerate(chunks):
            reply_to = template.reply_to if index == 0 else None
            # What `send_chunk` does for a whole message, one coroutine layer less a chunk.
            sent = await self._send_with_fallback(
                channel,
                template,
                chunk,
                reply_to,
                send,
                index,
                last=index == len(chunks) - 1,
            )
            if sent is not None:
                ids.append(sent)
        return ids

    async def send_chunk(
        self,
        channel: Channel,
        template: OutboundMessage,
        chunk: Chunk,
        *,
        reply_to: str | None,
        part: int = 0,
        editable: bool = False,
    ) -> str | None:
        """One chunk as a message; the platform's id of it, where the channel gives one.
        `editable`: a stream will edit it, so it goes by `send_with_id` (whose id is the point)
        rather than as a whole message."""
        send = channel.send_with_id if editable else _whole_send(channel)
        return await self._send_with_fallback(channel, template, chunk, reply_to, send, part)

    async def edit(self, channel: Channel, chat_id: str, message_id: str, chunk: Chunk) -> None:
        """A stream's intermediate edit: paced after replies, since a later one replaces it."""
        await self._edit_with_fallback(
            channel, chat_id, message_id, chunk, channel.edit_message, Priority.EDIT
        )

    async def finish(self, channel: Channel, chat_id: str, message_id: str, chunk: Chunk) -> None:
        await self._edit_with_fallback(
            channel, chat_id, message_id, chunk, channel.finish_stream, Priority.REPLY
        )
        self.sent.note(channel.name, chat_id, message_id, chunk.raw)

    async def delete(self, channel: Channel, chat_id: str, message_id: str) -> None:
        await self.retrier.call(
            functools.partial(channel.delete_message, chat_id, message_id),
            channel=channel.name,
            chat_id=chat_id,
            action="delete",
        )

    def record_failure(self, channel: str, chat_id: str, error: DeliveryError) -> None:
        """Log and count a message given up on; the one place every failure is reported."""
        self.metrics.send_failed(channel, error.reason)
        log.error(
            "delivery.failed",
            channel=channel,
            chat_id=chat_id,
            reason=error.reason,
            attempts=error.attempts,
            error=str(error),
        )

    async def _send_with_fallback(
        self,
        channel: Channel,
        template: OutboundMessage,
        chunk: Chunk,
        reply_to: str | None,
        send: Callable[[OutboundMessage], Awaitable[T]],
        part: int,
        *,
        last: bool = True,
    ) -> T | None:
        def sending(text: Chunk) -> Callable[[], Awaitable[T]]:
            message = chunk_message(template, text, reply_to=reply_to, part=part, last=last)
            return functools.partial(send, message)

        result = await self._formatted_then_plain(channel, template.chat_id, "send", chunk, sending)
        self.metrics.message_sent(channel.name)
        if isinstance(result, str):
            self.sent.note(channel.name, template.chat_id, result, chunk.raw)
        return result

    async def _edit_with_fallback(
        self,
        channel: Channel,
        chat_id: str,
        message_id: str,
        chunk: Chunk,
        edit: Callable[[str, str, str], Awaitable[None]],
        priority: Priority,
    ) -> None:
        def editing(text: Chunk) -> Callable[[], Awaitable[None]]:
            return functools.partial(edit, chat_id, message_id, text.formatted)

        await self._formatted_then_plain(channel, chat_id, "edit", chunk, editing, priority)
        self.metrics.stream_edited(channel.name)

    async def _formatted_then_plain(
        self,
        channel: Channel,
        chat_id: str,
        action: str,
        chunk: Chunk,
        operation: Callable[[Chunk], Callable[[], Awaitable[T]]],
        priority: Priority = Priority.REPLY,
    ) -> T | None:
        """`operation` on the chunk as formatted; if the platform rejects the markup, once more
        on the agent's plain text. Rejected as plain text too is a `DeliveryError`."""
        call = self.retrier.call
        try:
            return await call(
                operation(chunk),
                channel=channel.name,
                chat_id=chat_id,
                action=action,
                priority=priority,
            )
        except FormattingRejected as exc:
            if not chunk.is_formatted:
                raise self._formatting_error(channel, chat_id, exc) from exc
            log.info(
                "delivery.formatting_rejected",
                channel=channel.name,
                chat_id=chat_id,
                action=action,
                error=str(exc),
            )
        try:
            plain = operation(Chunk(chunk.raw, chunk.raw))
            return await call(
                plain, channel=channel.name, chat_id=chat_id, action=action, priority=priority
            )
        except FormattingRejected as again:
            raise self._formatting_error(channel, chat_id, again) from again

    @staticmethod
    def _formatting_error(channel: Channel, chat_id: str, exc: FormattingRejected) -> DeliveryError:
        return DeliveryError(
            f"chat {chat_id}: the platform rejected the text even as plain text ({exc})",
            reason=Reason.FORMATTING,
            channel=channel.name,
            attempts=1,
        )


# Idempotency keys for platforms that take one (Matrix txnId, LINE X-Line-Retry-Key).
#
# A reply part must carry the same key when it is sent again after a crash, so the platform shows
# it once. `OutboundMessage.delivery_id` is stable across re-deliveries; the part's own text is
# too (the splitter is deterministic), so the key is derived from both: two parts of one reply get
# different keys even where the gateway gives every part the same `delivery_id`. Without a
# `delivery_id` there is nothing stable to derive from, and a fresh random key is used.
#: The namespace of the UUIDs derived here (a fixed, random UUID: the derivation never changes).
_NAMESPACE = uuid.UUID("5b0f3c8e-7a51-4f5c-9d7e-2f6a0c1b9e43")


def delivery_key(message: OutboundMessage) -> str:
    """A key that is the same for the same part of the same reply, and only for it."""
    if message.delivery_id is None:
        return uuid.uuid4().hex
    digest = hashlib.sha256(message.content.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{message.delivery_id}.{digest[:24]}"


def delivery_uuid(message: OutboundMessage) -> str:
    """`delivery_key` as a UUID in hexadecimal form, for platforms that require one."""
    if message.delivery_id is None:
        return str(uuid.uuid4())
    return key_uuid(delivery_key(message))


def key_uuid(key: str) -> str:
    """A delivery key (`delivery_key`, or `send_attachment`'s) as a UUID in hexadecimal form."""
    return str(uuid.uuid5(_NAMESPACE, key))


def attachment_key(reply: OutboundMessage, number: int) -> str:
    """The delivery key of the `number`-th file of `reply` (from 1): the same on every resend
    of this reply, another for each file and for each text part."""
    if reply.delivery_id is None:
        return uuid.uuid4().hex
    return f"{reply.delivery_id}.file{number}"


async def on_disk(attachment: Attachment) -> bool:
    """Whether this process has the file (a cluster's ingress may not have a worker's)."""
    return await asyncio.to_thread(os.path.isfile, attachment.path)


def fits(channel: Channel, attachment: Attachment) -> bool:
    """Whether `channel`'s platform takes `attachment` (`Channel.max_attachment_bytes`)."""
    limit = channel.max_attachment_bytes(attachment.kind)
    return limit is None or attachment.size <= limit


#: What a chat is told in place of a file its platform does not take.
TOO_LARGE_NOTICE = (
    "Sorry, I could not send {name} here: it is {size}, and {platform} takes at most {limit}."
)


#: What a chat is told in place of a file this process does not have.
MISSING_NOTICE = "Sorry, I could not send {name}: the file is not on this gateway."


async def _notice_instead(
    channel: Channel, reply: OutboundMessage, attachment: Attachment
) -> str | None:
    """What the chat is told in place of `attachment` when it cannot be sent (logged); None
    when it can."""
    context = {"channel": channel.name, "chat_id": reply.chat_id, "file": attachment.name}
    if not await on_disk(attachment):
        # Kept by another process (a cluster worker on another host): the chat is told.
        log.warning("delivery.attachment_missing", path=attachment.path, **context)
        return MISSING_NOTICE.format(name=attachment.name)
    limit = channel.max_attachment_bytes(attachment.kind)
    if limit is not None and not fits(channel, attachment):
        log.warning("delivery.attachment_too_large", size=attachment.size, limit=limit, **context)
        return TOO_LARGE_NOTICE.format(
            name=attachment.name,
            size=human_size(attachment.size),
            platform=channel.name,
            limit=human_size(limit),
        )
    return None


def notice_for(reply: OutboundMessage, text: str, key: str) -> OutboundMessage:
    """A note sent in place of one of `reply`'s files, under that file's delivery key."""
    metadata = {name: value for name, value in reply.metadata.items() if name != FORMATTED}
    return OutboundMessage(
        channel=reply.channel,
        chat_id=reply.chat_id,
        content=text,
        metadata=metadata,
        delivery_id=key,
    )
