"""Outbound delivery: split, format and send a reply under the one retry policy.

The text is split raw (the splitter knows Markdown) and each chunk formatted afterwards; a
chunk that formatting pushed past the platform's limit is split again with a proportionally
smaller budget until it fits, so the limit holds for what the platform receives.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from bus import OutboundMessage
from channels.base import FORMATTED, Channel
from channels.coalesce import split_message
from channels.errors import DeliveryError, FormattingRejected
from channels.limits import PlatformLimit
from channels.metrics import ChannelMetrics
from channels.retry import Reason, Retrier

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: The most messages one reply becomes; the splitter ends with a truncation notice past it.
MAX_CHUNKS = 50


@dataclass(frozen=True, slots=True)
class Chunk:
    """One message's worth of a reply: the agent's text and what the platform is sent."""

    raw: str
    formatted: str

    @property
    def is_formatted(self) -> bool:
        return self.formatted != self.raw


def fit_chunks(channel: Channel, text: str, *, max_chunks: int | None = MAX_CHUNKS) -> list[Chunk]:
    """`text` in chunks whose formatted form fits `channel.limit`, in order."""
    if max_chunks is not None and channel.max_reply_messages is not None:
        # Room for the truncation notice the splitter adds past the cap.
        max_chunks = max(1, min(max_chunks, channel.max_reply_messages - 1))
    chunks: list[Chunk] = []
    for raw in split_message(text, channel.limit, max_chunks=max_chunks):
        chunks.extend(_fit(channel, raw))
    return chunks


def _fit(channel: Channel, raw: str) -> list[Chunk]:
    limit = channel.limit
    formatted = channel.format_outbound(raw)
    measured = limit.measure(formatted)
    if measured <= limit.max_units:
        return [Chunk(raw, formatted)]
    # Formatting grew the text: shrink the raw budget by the same ratio (and by at least one
    # unit, so this ends), split the raw chunk again and check each piece the same way.
    raw_units = limit.measure(raw)
    budget = min(raw_units - 1, raw_units * limit.max_units // measured)
    pieces = (
        split_message(raw, PlatformLimit(budget, limit.unit), max_chunks=None)
        if budget >= 1
        else []
    )
    if len(pieces) < 2 or any(limit.measure(piece) >= raw_units for piece in pieces):
        log.warning(
            "delivery.chunk_does_not_fit",
            channel=channel.name,
            measured=measured,
            limit=limit.max_units,
        )
        return [Chunk(raw, formatted)]
    return [chunk for piece in pieces for chunk in _fit(channel, piece)]


def chunk_message(
    template: OutboundMessage, chunk: Chunk, *, reply_to: str | None, part: int = 0
) -> OutboundMessage:
    """A copy of `template` carrying one chunk, flagged when it went through formatting.

    `part` numbers the platform messages of one reply: the chunk's `delivery_id` is the
    reply's with `.part` appended, the same on every resend of that part.
    """
    metadata = {key: value for key, value in template.metadata.items() if key != FORMATTED}
    if chunk.is_formatted:
        metadata[FORMATTED] = True
    update: dict[str, object] = {
        "content": chunk.formatted,
        "reply_to": reply_to,
        "metadata": metadata,
    }
    if template.delivery_id is not None:
        update["delivery_id"] = f"{template.delivery_id}.{part}"
    return template.model_copy(update=update)


class Delivery:
    """Sends, edits and finishes messages on a channel with the retry policy and metrics."""

    def __init__(self, retrier: Retrier, metrics: ChannelMetrics) -> None:
        self.retrier = retrier
        self.metrics = metrics

    async def send_message(self, channel: Channel, message: OutboundMessage) -> None:
        """A whole reply: media as is, text split to the limit; the first failure stops it.

        An empty reply is still the answer (a request to the HTTP API waits for it), so the
        channel gets it as is, unsplit; text of blanks alone has nothing to split and is skipped.
        """
        if message.media or not message.content:
            await self._call(
                channel, message.chat_id, "send", functools.partial(channel.send, message)
            )
            self.metrics.message_sent(channel.name)
            return
        await self.send_chunks(channel, message, fit_chunks(channel, message.content))

    async def send_chunks(
        self,
        channel: Channel,
        template: OutboundMessage,
        chunks: list[Chunk],
        *,
        first: bool = True,
        first_part: int = 0,
    ) -> None:
        """Each chunk as its own message; only the reply's first message keeps `reply_to`."""
        for index, chunk in enumerate(chunks):
            reply_to = template.reply_to if first and index == 0 else None
            await self.send_chunk(
                channel, template, chunk, reply_to=reply_to, part=first_part + index
            )

    async def send_chunk(
        self,
        channel: Channel,
        template: OutboundMessage,
        chunk: Chunk,
        *,
        reply_to: str | None,
        part: int = 0,
    ) -> None:
        async def send(message: OutboundMessage) -> None:
            await channel.send(message)

        await self._send_with_fallback(channel, template, chunk, reply_to, send, part)

    async def send_chunk_with_id(
        self,
        channel: Channel,
        template: OutboundMessage,
        chunk: Chunk,
        *,
        reply_to: str | None,
        part: int = 0,
    ) -> str | None:
        """Send and return the platform's id of the new message (None if it gave none)."""
        return await self._send_with_fallback(
            channel, template, chunk, reply_to, channel.send_with_id, part
        )

    async def edit(self, channel: Channel, chat_id: str, message_id: str, chunk: Chunk) -> None:
        await self._edit_with_fallback(channel, chat_id, message_id, chunk, channel.edit_message)

    async def finish(self, channel: Channel, chat_id: str, message_id: str, chunk: Chunk) -> None:
        await self._edit_with_fallback(channel, chat_id, message_id, chunk, channel.finish_stream)

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
    ) -> T | None:
        message = chunk_message(template, chunk, reply_to=reply_to, part=part)
        try:
            result = await self._call(
                channel, template.chat_id, "send", functools.partial(send, message)
            )
        except FormattingRejected as exc:
            if not chunk.is_formatted:
                raise self._formatting_error(channel, template.chat_id, exc) from exc
            log.info(
                "delivery.formatting_rejected",
                channel=channel.name,
                chat_id=template.chat_id,
                error=str(exc),
            )
            plain = chunk_message(
                template, Chunk(chunk.raw, chunk.raw), reply_to=reply_to, part=part
            )
            try:
                result = await self._call(
                    channel, template.chat_id, "send", functools.partial(send, plain)
                )
            except FormattingRejected as again:
                raise self._formatting_error(channel, template.chat_id, again) from again
        self.metrics.message_sent(channel.name)
        return result

    async def _edit_with_fallback(
        self,
        channel: Channel,
        chat_id: str,
        message_id: str,
        chunk: Chunk,
        edit: Callable[[str, str, str], Awaitable[None]],
    ) -> None:
        try:
            await self._call(
                channel,
                chat_id,
                "edit",
                functools.partial(edit, chat_id, message_id, chunk.formatted),
            )
        except FormattingRejected as exc:
            if not chunk.is_formatted:
                raise self._formatting_error(channel, chat_id, exc) from exc
            try:
                await self._call(
                    channel,
                    chat_id,
                    "edit",
                    functools.partial(edit, chat_id, message_id, chunk.raw),
                )
            except FormattingRejected as again:
                raise self._formatting_error(channel, chat_id, again) from again
        self.metrics.stream_edited(channel.name)

    async def _call(
        self, channel: Channel, chat_id: str, action: str, operation: Callable[[], Awaitable[T]]
    ) -> T | None:
        return await self.retrier.call(
            operation, channel=channel.name, chat_id=chat_id, action=action
        )

    @staticmethod
    def _formatting_error(channel: Channel, chat_id: str, exc: FormattingRejected) -> DeliveryError:
        return DeliveryError(
            f"chat {chat_id}: the platform rejected the text even as plain text ({exc})",
            reason=Reason.FORMATTING,
            channel=channel.name,
            attempts=1,
        )
