"""Reading what a work-queue stream holds on one subject, oldest first, without a consumer.

A partition's consumer holds one message at a time, and a work-queue stream allows no second
consumer on its subject, so what waits behind it is read by sequence (`get_msg`, the next
message on the subject from a sequence on): what waits behind a worker's message
(`cluster.chat_queue`), and the replies of a chat not delivered yet (`cluster.live_order`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError


async def stored_on(
    js: JetStreamContext, stream: str, subject: str, *, after_seq: int, limit: int
) -> AsyncIterator[RawStreamMsg]:
    """The messages `stream` holds on `subject` after sequence `after_seq`, at most `limit`."""
    next_seq = after_seq + 1
    for _ in range(limit):
        try:
            raw = await js.get_msg(stream, seq=next_seq, subject=subject, next=True)
        except NotFoundError:
            return
        assert raw.seq is not None
        next_seq = raw.seq + 1
        yield raw
