"""Fitting a reply to a channel: the one function delivery and stream editing both call.

The text is split raw (the splitter, `coalesce.py`, knows Markdown) and each chunk rendered
with the channel's `format_outbound` afterwards; a chunk that rendering pushed past the
platform's limit is split again with a proportionally smaller budget until it fits, so the limit
holds for what the platform receives, measured in the platform's own unit.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from channels.base import Channel
from channels.coalesce import MAX_CHUNKS, split_message
from channels.limits import PlatformLimit

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
    for raw in split_message(text, channel.limit, max_chunks=max_chunks):
        chunks.extend(_fit(channel, raw))
    return chunks


def _fit(channel: Channel, raw: str) -> list[Chunk]:
    limit = channel.limit
    chunk = Chunk.rendered(channel, raw)
    measured = limit.measure(chunk.formatted)
    if measured <= limit.max_units:
        return [chunk]
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
            "coalesce.chunk_does_not_fit",
            channel=channel.name,
            measured=measured,
            limit=limit.max_units,
        )
        return [chunk]
    return [chunk for piece in pieces for chunk in _fit(channel, piece)]
