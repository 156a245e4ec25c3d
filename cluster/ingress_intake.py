"""An ingress process's `InboundSender`: the edge checks, then a publish to the inbound stream.

At the edge: the channel's allow list (a stranger gets the notice of `gateway.turn.strangers`, the
agent never sees them) and the stop. Then the message is published to its partition's subject
with `Nats-Msg-Id` = its platform id, and `send` returns only after JetStream's publish ack: the
channel acknowledges the platform after that, unchanged. A publish that fails raises
`InboundRefused`, so the channel tells the platform to retry later, exactly as when a backlog
is full. JetStream drops a platform retry within its duplicate window (the ack says duplicate).

A channel that holds a request open for the reply (the HTTP API) publishes every attempt (its
id gets a nonce): the worker recognises the inbound id and answers a retry with the stored
reply, sent to this process's reply subject, where the request waits. Every message names this
process and what its channel shows while a turn runs (edits, typing): the worker sends the
turn's live events here (`cluster.live`).

A stop (`/stop`, an abort trigger) and, in `queue_mode: interrupt`, any newer message of a chat
must end the chat's running turn, which holds the partition the message waits in: once it is
durable, a `Cancel` naming it goes to every worker (`cluster.cancels`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext

from bus import InboundMessage, InboundRefused
from channels.base import Channel
from cluster.cancels import Cancel, CancelReason, publish_cancel
from cluster.chat_queue import chat_of
from cluster.codec import InboundEnvelope, platform_id
from cluster.connection import NATS_ERRORS, REQUEST_TIMEOUT_S
from cluster.subjects import ClusterNames
from config.profile import QueueMode
from gateway.metrics import GatewayMetrics
from gateway.turn.strangers import EdgeCheck, StrangerNotices, scrubbed
from gateway.turn.triage import triage

log = structlog.get_logger(__name__)


class ClusterIntake:
    def __init__(
        self,
        profile: str,
        client: Client,
        names: ClusterNames,
        ingress_id: str,
        channel_named: Callable[[str], Channel | None],
        strangers: StrangerNotices,
        metrics: GatewayMetrics,
        *,
        queue_mode: QueueMode = "followup",
        retry_after_s: float = 5.0,
    ) -> None:
        self._profile = profile
        self._client = client
        self._js: JetStreamContext = client.jetstream(timeout=REQUEST_TIMEOUT_S)
        self._queue_mode = queue_mode
        self._names = names
        self._ingress_id = ingress_id
        self._metrics = metrics
        self._retry_after_s = retry_after_s
        self._edge = EdgeCheck(channel_named, strangers, self._count)

    def close(self) -> None:
        """Channels share the profile's intake; `stop` is what ends it."""

    def stop(self) -> None:
        """Take no more: channels get `PipeClosed`."""
        self._edge.closed = True

    def _count(self, message: InboundMessage, outcome: str) -> None:
        self._metrics.messages_in.labels(self._profile, message.channel, outcome).inc()

    async def send(self, message: InboundMessage) -> None:
        channel = await self._edge.admit(message)
        if channel is None:
            return
        envelope = self._envelope(channel, scrubbed(message))
        msg_id = envelope.inbound_id
        if envelope.request:
            msg_id = f"{msg_id}.{uuid.uuid4().hex}"  # every attempt reaches a worker
        partition = self._names.partition_of_chat(self._profile, envelope.message)
        try:
            ack = await self._js.publish(
                self._names.inbound_subject(partition),
                envelope.body(),
                timeout=REQUEST_TIMEOUT_S,
                stream=self._names.inbound_stream,
                headers=envelope.headers(msg_id),
            )
        except NATS_ERRORS as error:
            log.warning("cluster.publish_failed", error=str(error) or type(error).__name__)
            raise InboundRefused(
                "global", self._retry_after_s, f"the inbound stream cannot be written: {error}"
            ) from error
        self._count(message, "duplicate" if ack.duplicate else "accepted")
        if not ack.duplicate:
            await self._cancel_running_turn(envelope, ack.seq)
        log.debug(
            "cluster.published",
            partition=partition,
            seq=ack.seq,
            duplicate=bool(ack.duplicate),
            chat=message.chat_id,
        )

    async def _cancel_running_turn(self, envelope: InboundEnvelope, seq: int) -> None:
        """A stop, or a newer message in interrupt mode: the chat's turn ends now, not when
        the partition reaches the message."""
        kind = triage(envelope.message.content).kind
        reason: CancelReason
        if kind == "stop":
            reason = "stop"
        elif kind == "text" and self._queue_mode == "interrupt":
            reason = "interrupt"
        else:
            return
        cancel = Cancel(
            profile=self._profile, chat=chat_of(envelope), before_seq=seq, reason=reason
        )
        await publish_cancel(self._client, self._names.cancel_subject, cancel)

    def _envelope(self, channel: Channel, message: InboundMessage) -> InboundEnvelope:
        native = platform_id(self._profile, message)
        request = channel.replies_to_retries
        return InboundEnvelope(
            self._profile,
            native or uuid.uuid4().hex,
            message,
            request=request,
            reply_subject=self._names.reply_subject(self._ingress_id) if request else None,
            # This process shows the turn's snapshots and typing, as far as the channel can.
            ingress=self._ingress_id,
            streams=channel.supports_edit(),
            shows_typing=channel.shows_typing(),
        )
