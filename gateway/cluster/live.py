"""A running turn's live events, from its worker to the ingress that shows them.

Stream snapshots, typing signals and the bot's reactions (the working reaction, the agent's)
go over core NATS (not stored) to `{prefix}.live.{ingress}`, the subject of the ingress process
that took the turn's message in: that process runs the chat's channel (it just received on it),
and only one process may edit a streamed message. The turn's reply names it too
(`Octos-Live-At`), so whichever ingress takes the reply from the outbound stream hands it over
there to finish the stream (`gateway.cluster.live_ingress`). The buttons of a message whose tap
passed go the same way (`show_buttons_used`): the ingress's channel manager takes them off, as
one process's does.

Losing an event costs little: a snapshot is the whole text so far, typing stops with the reply
(or times out), the reply itself is durable, and a tap on buttons left showing is refused by the
table of used buttons all the same. So the publish never holds the turn up: it is a write into
the connection's buffer, skipped while that buffer holds more than `MAX_BACKLOG_BYTES` (a slow or
lost connection), and a failure is a debug line. As in one process, a channel that cannot edit
gets no snapshots, one without typing no typing signals, and one that shows buttons as a list
no buttons taken off: the ingress says which in the inbound message's `Octos-Live` header. Every
channel with reactions edits or shows typing, so a turn that reacts has an ingress to show it.

A turn's live events must not overtake the replies of its chat still to be delivered, yet a
snapshot opens a message in the chat as soon as the showing ingress gets it, while the replies
before it travel the outbound stream (to whichever ingress takes them, handed over to the one that
showed their turn). So before a turn streams, its worker reads what of the chat is still there, in
its partition of the outbound stream (a work queue: what is there is not delivered yet):

- nothing: the turn streams;
- replies of the chat: the turn streams, its live events marked to be shown after the last
  of them (`after`). The showing ingress holds them until that reply was handed over to it,
  or its own delivery layer delivered it (whole, its ingress gone, or handed over to another
  that showed its turn), and drops them should neither happen (`gateway.cluster.live_ingress`): then
  the turn's reply comes whole, in the partition's order, behind it;
- more than `SCAN_LIMIT` replies to read, or the stream cannot be read: the turn does not
  stream (its reply comes whole).
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext

from bus import ButtonsUsed, OutboundEvent, OutboundMessage
from gateway.cluster.codec import (
    MSG_ID,
    CodecError,
    InboundEnvelope,
    OutboundEnvelope,
    live_signal_message,
)
from gateway.cluster.connection import NATS_ERRORS
from gateway.cluster.streams import ClusterNames, stored_on

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
        info = await js.consumer_info(stream, names.delivery_consumer(message.channel, partition))
        if not info.num_pending and not info.num_ack_pending:
            return LiveOrder(streams=True)
        msg_ids: list[str] = []
        read = 0
        subject = names.outbound_subject(message.channel, partition)
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


#: Live events are skipped while the connection has this much not yet written to the server.
MAX_BACKLOG_BYTES = 256 * 1024


@dataclass(slots=True)
class LiveTurn:
    """One turn's outbound sink (`gateway.turn.runner.OutboundSink`) towards its ingress."""

    client: Client
    subject: str
    profile: str
    _: KW_ONLY
    streams: bool
    shows_typing: bool
    #: The reply of the chat (its message id) the ingress shows these events after.
    after: str | None = None
    #: Events not sent (a slow or lost connection): losing one costs nothing, see above.
    skipped: int = field(default=0, init=False)

    async def send(self, event: OutboundEvent) -> None:
        if isinstance(event, OutboundMessage):
            raise TypeError("a turn's reply goes to the outbound stream, never as a live event")
        client = self.client
        if not client.is_connected or client.pending_data_size > MAX_BACKLOG_BYTES:
            self.skipped += 1
            log.debug("cluster.live_event_skipped", backlog_bytes=client.pending_data_size)
            return
        headers, body = live_signal_message(self.profile, event, after=self.after)
        try:
            await client.publish(self.subject, body, headers=headers)
        except NATS_ERRORS as error:
            self.skipped += 1
            log.debug("cluster.live_event_not_sent", error=str(error) or type(error).__name__)


async def live_turn(
    client: Client, js: JetStreamContext, names: ClusterNames, envelope: InboundEnvelope
) -> LiveTurn | None:
    """Where the turn of `envelope` shows itself; None when its channel shows nothing live.
    Whether it streams, and after which reply of its chat, is `gateway.cluster.live`'s say (a
    reply to a held request has an order of its own)."""
    ingress = envelope.live_at
    if ingress is None:
        return None
    order = LiveOrder(streams=envelope.streams)
    if envelope.streams and not envelope.request:
        order = await live_order(js, names, envelope)
    return LiveTurn(
        client,
        names.live_subject(ingress),
        envelope.profile,
        streams=order.streams,
        shows_typing=envelope.shows_typing,
        after=order.after,
    )


async def show_buttons_used(
    client: Client, names: ClusterNames, envelope: InboundEnvelope, message_id: str
) -> None:
    """The buttons of the bot's message `message_id`, tapped by `envelope`'s message, taken off
    by the ingress that took the tap in, where its channel shows them on the message. Sent as the
    tap's turn starts, with no order to keep: the reply holding them was delivered (it was
    tapped)."""
    if envelope.ingress is None or not envelope.buttons_attached:
        return
    message = envelope.message
    sink = LiveTurn(
        client,
        names.live_subject(envelope.ingress),
        envelope.profile,
        streams=False,
        shows_typing=False,
    )
    await sink.send(ButtonsUsed(message.channel, message.chat_id, message_id))
