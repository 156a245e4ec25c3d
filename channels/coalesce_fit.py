"""Fitting a reply to a channel: the one function delivery and stream editing both call.

The text is split raw (the splitter, `coalesce.py`, knows Markdown) and each chunk rendered
with the channel's `format_outbound`; the splitter measures each chunk's rendering and fills it
as far as the limit allows (`split_rendered`), so the limit holds for what the platform
receives, measured in the platform's own unit, and no chunk is left short because its markup
grew it.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from channels.base import Channel
from channels.coalesce import MAX_CHUNKS, split_rendered

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
                "coalesce.chunk_does_not_fit",
                channel=channel.name,
                measured=channel.limit.measure(formatted),
                limit=channel.limit.max_units,
            )
        chunks.append(Chunk(raw, formatted))
    return chunks
