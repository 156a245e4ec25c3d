"""An ingress process's side of replies: the outbound stream, delivered through the channels.

One loop per outbound partition of each channel its profiles run (its consumer has
`max_ack_pending=1`, so a chat's replies are delivered one at a time, in order, by whichever
ingress holds the partition's message; a channel whose platform is down holds only its own
partitions), plus one loop on this process's own reply subject: the replies to requests it
holds open (the HTTP API). Each reply goes through the profile's `ChannelManager` (retry layer,
splitting, formatting), with heartbeats while it takes long. Once delivered or given up on (a
failure is logged and counted by the delivery layer, as in one process) it is recorded in
PostgreSQL (`gateway.cluster.record_table`: the turn, the platform message ids), and only then
acknowledged.
A reply given up on is first kept whole as a dead letter (`gateway.cluster.dead_letters`, with the
delivery layer's reason), as one process keeps it in its data directory: buried before its
record, so a crash between the two offers it again (and a second burial of the same message is
dropped by JetStream), never leaves it recorded and lost. When it cannot be buried (NATS away)
it is not recorded either, and offered again.
A reply offered again whose delivery is recorded is acknowledged without being sent again.
A reply whose turn was shown live by an ingress (`Octos-Live-At`) is handed over to that
ingress to deliver (`gateway.cluster.live_ingress`), and recorded here with the outcome it reports.

The window left: an ingress killed after the platform took a reply and before its record was
committed sends it again when the reply is offered again (a reply split into several messages
is recorded whole, so all of them). A record that cannot be written (the database is away) is
logged and the reply acknowledged anyway: only a crash in the same moment would resend it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from prometheus_client import Counter

from bus import OutboundMessage
from channels.retry import Backoff, Reason
from config.bus import NatsConfig
from gateway import logs
from gateway.cluster.codec import MSG_ID, CodecError, Delivered, OutboundEnvelope
from gateway.cluster.connection import NATS_ERRORS, REQUEST_TIMEOUT_S
from gateway.cluster.dead_letters import bury_reply
from gateway.cluster.live_ingress import hand_over
from gateway.cluster.node_service import ClusterMetrics, NodeService, heartbeats
from gateway.cluster.pull import pull_forever
from gateway.cluster.record_table import DeliveryRecord, DeliveryRecords, start_record_expiry
from gateway.cluster.streams import ensure_consumer, ensure_delivery_consumers, reply_consumer
from sessions.errors import SessionError

log = structlog.get_logger(__name__)

__all__ = ["Deliver", "Delivered", "ReplyDelivery"]


#: Delivers one reply with the profile's channels; returns once delivered or given up on.
Deliver = Callable[[OutboundMessage], Awaitable[Delivered]]
#: Until a profile's channels run here, its replies wait this long before they are offered again.
NOT_HERE_DELAY_S = 1.0
#: Pauses between attempts to make a channel's delivery consumers (NATS away, or busy electing).
CONSUMERS_BACKOFF = Backoff(initial_s=0.25, max_s=5.0)


class ReplyDelivery(NodeService[DeliveryRecords]):
    def __init__(
        self,
        client: Client,
        js: JetStreamContext,
        config: NatsConfig,
        ingress_id: str,
        records: DeliveryRecords,
        metrics: ClusterMetrics,
        reply_dead_letters: Counter,
        delivered_here: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        """`reply_dead_letters`: the count of replies kept as dead letters, by profile, channel
        and reason (one process's `octos_reply_dead_letters_total`).
        `delivered_here(profile, msg_id)`: told of each reply this process delivered (or handed
        over and saw delivered), once it is recorded."""
        super().__init__(client, js, config, records, metrics)
        self._reply_dead_letters = reply_dead_letters
        self._delivered_here = delivered_here
        self._ingress_id = ingress_id
        self._profiles: dict[str, Deliver] = {}
        #: The channels whose partitions this process delivers: those of its profiles.
        self._channels: set[str] = set()
        self._tasks: asyncio.TaskGroup | None = None

    def add_profile(self, profile: str, deliver: Deliver, channels: Iterable[str]) -> None:
        """Deliver `profile`'s replies here, and the partitions of its channels from now on."""
        self._profiles[profile] = deliver
        for channel in channels:
            if channel not in self._channels:
                self._channels.add(channel)
                if self._tasks is not None:
                    self._start_channel(self._tasks, channel)

    def remove_profile(self, profile: str) -> None:
        self._profiles.pop(profile, None)

    async def run(self) -> None:
        names = self._names
        own = reply_consumer(names, self._ingress_id, self._config)
        await ensure_consumer(self._js, names.outbound_stream, own)
        assert own.durable_name is not None
        shared = await self._shared_consumers()
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                for durable in [*shared, own.durable_name]:
                    self._pull(tasks, durable)
                for channel in self._channels:
                    self._start_channel(tasks, channel)
                start_record_expiry(
                    tasks,
                    "octos_cluster_deliveries",
                    self._records.forget_older_than,
                    self._stopping,
                )
                log.info("cluster.delivery_running", partitions=self._config.partitions)
        finally:
            self._tasks = None
        await self._forget_own_consumer(own.durable_name)

    def _pull(self, tasks: asyncio.TaskGroup, durable: str) -> None:
        stream = self._names.outbound_stream
        tasks.create_task(
            pull_forever(self._js, stream, durable, self.handle, self._stopping),
            name=f"delivery:{durable}",
        )

    def _start_channel(self, tasks: asyncio.TaskGroup, channel: str) -> None:
        work = self._deliver_channel(channel)
        try:
            tasks.create_task(work, name=f"delivery-channel:{channel}")
        except RuntimeError:
            # Delivery is stopping (its task group takes no new task): nothing to start.
            work.close()

    async def _deliver_channel(self, channel: str) -> None:
        """Make the channel's delivery consumers, then deliver from each of its partitions."""
        failures = 0
        while True:
            try:
                await ensure_delivery_consumers(self._js, self._config, channel)
                break
            except NATS_ERRORS as error:
                failures += 1
                log.warning(
                    "cluster.delivery_consumers_not_made",
                    channel=channel,
                    error=str(error) or type(error).__name__,
                    suggestion="check that NATS and its JetStream are up; tried again",
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._stopping.wait(), CONSUMERS_BACKOFF.delay_s(failures)
                    )
                if self._stopping.is_set():
                    return
        async with asyncio.TaskGroup() as tasks:
            for partition in range(self._config.partitions):
                self._pull(tasks, self._names.delivery_consumer(channel, partition))

    async def _shared_consumers(self) -> list[str]:
        """The delivery consumers of a version that partitioned replies of all channels
        together, where they still exist: what they hold is delivered as before."""
        found = []
        for partition in range(self._config.partitions):
            durable = self._names.shared_delivery_consumer(partition)
            try:
                await self._js.consumer_info(self._names.outbound_stream, durable)
            except NotFoundError:
                continue
            except NATS_ERRORS as error:
                # Looked for again at the next start; a fresh cluster has none.
                log.warning("cluster.consumer_info_failed", consumer=durable, error=str(error))
                continue
            found.append(durable)
        return found

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
        message = envelope.message
        # Replies carry their turn's id; a notice without one (a dead letter's) is not recorded.
        msg_id = (msg.headers or {}).get(MSG_ID)
        key = (envelope.profile, msg_id) if msg_id and message.delivery_id else None
        if key is not None and await self._recorded_before(*key):
            await msg.ack_sync(timeout=REQUEST_TIMEOUT_S)
            return
        try:
            async with heartbeats(msg, self._config.ack_wait_s):
                delivered = await self._delivered(envelope, msg_id, deliver)
        except Exception:
            # Supervision point (per message): offered again, to this or another ingress.
            log.exception("cluster.delivery_failed", profile=envelope.profile)
            await msg.nak(delay=NOT_HERE_DELAY_S)
            return
        if key is not None and message.delivery_id is not None:
            if delivered.given_up is not None and not await self._kept_dead(
                msg, envelope, delivered
            ):
                await msg.nak(delay=NOT_HERE_DELAY_S)
                return
            await self._record(
                DeliveryRecord(
                    scope=key[0],
                    msg_id=key[1],
                    turn_id=message.delivery_id,
                    delivered=delivered.given_up is None,
                    platform_ids=delivered.platform_ids,
                    error=delivered.given_up,
                )
            )
        if self._delivered_here is not None and msg_id is not None:
            await self._delivered_here(envelope.profile, msg_id)
        await msg.ack_sync(timeout=REQUEST_TIMEOUT_S)
        if logs.debug_enabled:
            log.debug(
                "cluster.reply_done",
                profile=envelope.profile,
                channel=message.channel,
                given_up=delivered.given_up is not None,
            )

    async def _delivered(
        self, envelope: OutboundEnvelope, msg_id: str | None, deliver: Deliver
    ) -> Delivered:
        """Delivered by the ingress that showed its turn live, if any is; else here."""
        if envelope.live_at is not None and msg_id is not None:
            handed = await hand_over(self._client, self._names, envelope, msg_id)
            elsewhere = envelope.live_at != self._ingress_id
            log.debug("cluster.reply_handed_over", ingress=envelope.live_at, elsewhere=elsewhere)
            if handed is not None:
                if elsewhere:
                    self._metrics.replies_handed_over.labels(envelope.profile).inc()
                return handed
        return await deliver(envelope.message)

    async def _kept_dead(self, msg: Msg, envelope: OutboundEnvelope, given_up: Delivered) -> bool:
        """Keep a reply given up on as a dead letter; False when it could not be kept."""
        message = envelope.message
        try:
            seq = await bury_reply(self._js, self._names, msg, envelope, given_up)
        except NATS_ERRORS as error:
            log.error(
                "cluster.reply_dead_letter_not_kept",
                profile=envelope.profile,
                turn=message.delivery_id,
                error=str(error) or type(error).__name__,
                suggestion="check that NATS is up; the reply is offered again meanwhile",
            )
            return False
        reason = given_up.reason or Reason.UNKNOWN
        self._reply_dead_letters.labels(envelope.profile, message.channel, reason).inc()
        log.warning(
            "cluster.reply_dead_letter",
            profile=envelope.profile,
            channel=message.channel,
            chat_id=message.chat_id,
            reason=reason,
            dead_letter=seq,
            suggestion=f"octos-gateway dead-letters show {seq} -c gateway.yaml; `retry` it "
            "once the cause is fixed",
        )
        return True

    async def _recorded_before(self, profile: str, msg_id: str) -> bool:
        """Whether this reply's delivery is recorded already (it is then not sent again)."""
        try:
            record = await self._records.find(profile, msg_id)
        except SessionError as error:
            # Unknown: deliver it (at least once) rather than hold replies while it is away.
            log.warning("cluster.delivery_record_unread", profile=profile, error=str(error))
            return False
        if record is None:
            return False
        self._metrics.replies_not_resent.labels(profile).inc()
        log.info(
            "cluster.reply_already_delivered",
            profile=profile,
            turn=record.turn_id,
            delivered=record.delivered,
            platform_ids=list(record.platform_ids),
        )
        return True

    async def _record(self, record: DeliveryRecord) -> None:
        try:
            await self._records.record(record)
        except SessionError as error:
            # Delivered either way: acknowledging it now resends nothing unless we die first.
            log.warning(
                "cluster.delivery_not_recorded",
                profile=record.scope,
                turn=record.turn_id,
                error=str(error),
            )
