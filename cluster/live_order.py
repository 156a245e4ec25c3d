"""Where a turn's live events stand against the replies of its chat still to be delivered.

A snapshot opens a message in the chat as soon as the showing ingress gets it, while the
replies before it travel the outbound stream (to whichever ingress takes them, handed over to
the one that showed their turn). So before a turn streams, its worker reads what of the chat
is still there, in its partition of the outbound stream (a work queue: what is there is not
delivered yet):

- nothing: the turn streams;
- replies of the chat: the turn streams, its live events marked to be shown after the last
  of them (`after`). The showing ingress holds them until that reply was handed over to it,
  or its own delivery layer delivered it (whole, its ingress gone, or handed over to another
  that showed its turn), and drops them should neither happen (`cluster.held_signals`): then
  the turn's reply comes whole, in the partition's order, behind it;
- more than `SCAN_LIMIT` replies to read, or the stream cannot be read: the turn does not
  stream (its reply comes whole).
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from nats.js import JetStreamContext

from cluster.codec import MSG_ID, CodecError, InboundEnvelope, OutboundEnvelope
from cluster.connection import NATS_ERRORS
from cluster.stream_scan import stored_on
from cluster.subjects import ClusterNames

log = structlog.get_logger(__name__)

#: How many undelivered replies of a partition a worker reads before a turn streams.
SCAN_LIMIT = 64


@dataclass(frozen=True, slots=True)
class LiveOrder:
    streams: bool
    #: The message id of the reply the turn's live events are shown after, if any.
    after: str | None = None


NOT_STREAMED = LiveOrder(streams=False)


async def live_order(
    js: JetStreamContext, names: ClusterNames, envelope: InboundEnvelope
) -> LiveOrder:
    """Whether the turn of `envelope` (whose channel streams) may stream, and after what."""
    message = envelope.message
    partition = names.partition_of_chat(envelope.profile, message)
    stream = names.outbound_stream
    try:
        info = await js.consumer_info(stream, names.delivery_consumer(partition))
        if not info.num_pending and not info.num_ack_pending:
            return LiveOrder(streams=True)
        msg_ids: list[str] = []
        read = 0
        subject = names.outbound_subject(partition)
        async for raw in stored_on(js, stream, subject, after_seq=0, limit=SCAN_LIMIT):
            read += 1
            try:
                reply = OutboundEnvelope.decode(raw.headers, raw.data or b"")
            except CodecError:
                continue  # the delivery layer sets it aside
            if (reply.profile, reply.message.channel, reply.message.chat_id) == (
                envelope.profile,
                message.channel,
                message.chat_id,
            ):
                msg_ids.append((raw.headers or {}).get(MSG_ID, ""))
        if read == SCAN_LIMIT:
            return NOT_STREAMED  # more may wait than were read
    except NATS_ERRORS as error:
        # No ingress made the consumer yet, or the server is away: the reply comes whole.
        log.info("cluster.live_order_unknown", partition=partition, error=str(error))
        return NOT_STREAMED
    if not all(msg_ids):
        return NOT_STREAMED
    return LiveOrder(streams=True, after=msg_ids[-1] if msg_ids else None)
