"""A running turn's live events, from its worker to the ingress that shows them.

Stream snapshots and typing signals go over core NATS (not stored) to `{prefix}.live.{ingress}`,
the subject of the ingress process that took the turn's message in: that process runs the
chat's channel (it just received on it), and only one process may edit a streamed message. The
turn's reply names it too (`Octos-Live-At`), so whichever ingress takes the reply from the
outbound stream hands it over there to finish the stream (`cluster.live_ingress`).

Losing an event costs nothing: a snapshot is the whole text so far, typing stops with the reply
(or times out), and the reply itself is durable. So the publish never holds the turn up: it is
a write into the connection's buffer, skipped while that buffer holds more than
`MAX_BACKLOG_BYTES` (a slow or lost connection), and a failure is a debug line. As in one
process, a channel that cannot edit gets no snapshots and one without typing no typing signals:
the ingress says which in the inbound message's `Octos-Live` header.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext

from bus import OutboundEvent, OutboundMessage
from cluster.codec import InboundEnvelope, live_signal_message
from cluster.connection import NATS_ERRORS
from cluster.live_order import LiveOrder, live_order
from cluster.subjects import ClusterNames

log = structlog.get_logger(__name__)

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
    Whether it streams, and after which reply of its chat, is `cluster.live_order`'s say (a
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
