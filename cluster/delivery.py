"""An ingress process's side of replies: the outbound stream, delivered through the channels.

One loop per outbound partition (its consumer has `max_ack_pending=1`, so a chat's replies are
delivered one at a time, in order, by whichever ingress holds the partition's message), plus
one loop on this process's own reply subject: the replies to requests it holds open (the HTTP
API). Each reply goes through the profile's `ChannelManager` (retry layer, splitting,
formatting), with heartbeats while it takes long, and is acknowledged only once delivered or
given up on (a failure is logged and counted by the delivery layer, as in one process).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus import OutboundMessage
from cluster.codec import CodecError, OutboundEnvelope
from cluster.connection import REQUEST_TIMEOUT_S
from cluster.heartbeat import heartbeats
from cluster.pull import pull_forever
from cluster.streams import ensure_consumer, ensure_delivery_consumers, names_of, reply_consumer
from config.bus import NatsConfig

log = structlog.get_logger(__name__)

#: Delivers one reply with the profile's channels; returns once delivered or given up on.
Deliver = Callable[[OutboundMessage], Awaitable[None]]
#: Until a profile's channels run here, its replies wait this long before they are offered again.
NOT_HERE_DELAY_S = 1.0


class ReplyDelivery:
    def __init__(self, js: JetStreamContext, config: NatsConfig, ingress_id: str) -> None:
        self._js = js
        self._config = config
        self._names = names_of(config)
        self._ingress_id = ingress_id
        self._profiles: dict[str, Deliver] = {}
        self._stopping = asyncio.Event()

    def add_profile(self, profile: str, deliver: Deliver) -> None:
        self._profiles[profile] = deliver

    def remove_profile(self, profile: str) -> None:
        self._profiles.pop(profile, None)

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        names = self._names
        await ensure_delivery_consumers(self._js, self._config)
        own = reply_consumer(names, self._ingress_id, self._config)
        await ensure_consumer(self._js, names.outbound_stream, own)
        assert own.durable_name is not None
        consumers = [names.delivery_consumer(p) for p in range(self._config.partitions)]
        async with asyncio.TaskGroup() as tasks:
            for durable in [*consumers, own.durable_name]:
                tasks.create_task(
                    pull_forever(
                        self._js, names.outbound_stream, durable, self.handle, self._stopping
                    ),
                    name=f"delivery:{durable}",
                )
            log.info("cluster.delivery_running", partitions=self._config.partitions)
        await self._forget_own_consumer(own.durable_name)

    async def _forget_own_consumer(self, durable: str) -> None:
        """A clean stop removes this process's reply consumer (a crash leaves it to expire)."""
        try:
            await self._js.delete_consumer(self._names.outbound_stream, durable)
        except Exception as error:
            # Supervision point (shutdown): the server expires it anyway after a while.
            log.warning("cluster.reply_consumer_left", consumer=durable, error=str(error))

    async def handle(self, msg: Msg) -> None:
        try:
            envelope = OutboundEnvelope.decode(msg.headers, msg.data)
        except CodecError as error:
            log.error("cluster.reply_unreadable", error=str(error), subject=msg.subject)
            await msg.term()
            return
        deliver = self._profiles.get(envelope.profile)
        if deliver is None:
            log.info("cluster.reply_waits_for_profile", profile=envelope.profile)
            await msg.nak(delay=NOT_HERE_DELAY_S)
            return
        try:
            async with heartbeats(msg, self._config.ack_wait_s):
                await deliver(envelope.message)
        except Exception:
            # Supervision point (per message): offered again, to this or another ingress.
            log.exception("cluster.delivery_failed", profile=envelope.profile)
            await msg.nak(delay=NOT_HERE_DELAY_S)
            return
        await msg.ack_sync(timeout=REQUEST_TIMEOUT_S)
