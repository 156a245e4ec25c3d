"""Reply delivery on real NATS JetStream and PostgreSQL: a reply's delivery (its turn, the
platform message ids, delivered or given up) is recorded before the outbound message is
acknowledged, and a reply offered again whose delivery is recorded is not sent again. A reply
given up on is kept as a dead letter first, and its retry is delivered once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from prometheus_client import CollectorRegistry, Counter

from bus import OutboundMessage, new_turn_id
from bus.envelope import SENT_AGAIN_AT
from config.bus import NatsConfig
from gateway.cluster.codec import OutboundEnvelope
from gateway.cluster.dead_letters import DeadLetterMissing, DeadLetters
from gateway.cluster.delivery import Delivered, ReplyDelivery
from gateway.cluster.node_service import ClusterMetrics
from gateway.cluster.record_table import DeliveryRecord, DeliveryRecords
from gateway.cluster.streams import (
    ClusterNames,
    ensure_consumer,
    ensure_streams,
    names_of,
    partition_consumer,
)
from gateway.metrics import GatewayMetrics
from tests.cluster.harness import Observer, nats_config
from tests.support.postgres import fresh_scope

WAIT_S = 20.0


@dataclass
class Platform:
    """The channels' side: what was sent, and what each send makes of it."""

    sent: list[str] = field(default_factory=list)
    give_up: set[str] = field(default_factory=set)
    fail_once: set[str] = field(default_factory=set)
    #: Every reply handed to the channels, as handed.
    handed: list[OutboundMessage] = field(default_factory=list)

    async def deliver(self, message: OutboundMessage) -> Delivered:
        self.handed.append(message)
        if message.content in self.fail_once:
            self.fail_once.discard(message.content)
            raise RuntimeError("the channel manager broke")  # offered again, not recorded
        self.sent.append(message.content)
        if message.content in self.give_up:
            return Delivered(given_up="chat 1: the platform refused it", reason="auth")
        return Delivered((f"platform-{len(self.sent)}",))


@dataclass
class RunningDelivery:
    js: JetStreamContext
    config: NatsConfig
    names: ClusterNames
    records: DeliveryRecords
    metrics: ClusterMetrics
    reply_dead_letters: Counter
    observer: Observer
    profile: str
    platform: Platform

    async def publish(self, content: str, *, msg_id: str, turn_id: str | None) -> None:
        reply = OutboundMessage(
            channel="telegram", chat_id="1", content=content, delivery_id=turn_id
        )
        envelope = OutboundEnvelope(self.profile, reply)
        await self.js.publish(
            self.names.outbound_subject_of(self.profile, reply),
            envelope.body(),
            headers=envelope.headers(msg_id),
        )

    def acks(self) -> int:
        return len([s for s in self.observer.on("$JS.ACK.") if (s.data or b"+ACK") == b"+ACK"])

    def naks(self) -> int:
        return len([s for s in self.observer.on("$JS.ACK.") if s.data.startswith(b"-NAK")])

    def kept_dead(self, reason: str) -> float:
        counted = self.reply_dead_letters.labels(self.profile, "telegram", reason)
        return float(counted._value.get())

    def not_resent(self) -> float:
        return float(self.metrics.replies_not_resent.labels(self.profile)._value.get())


@asynccontextmanager
async def running_delivery(
    client: Client, prefix: str, dsn: str, *, before: list[OutboundMessage] | None = None
) -> AsyncIterator[RunningDelivery]:
    """`before`: replies an earlier version published on its shared partitions, with its
    consumers, before this delivery starts."""
    config = nats_config(prefix, partitions=2)
    names = names_of(config)
    js = client.jetstream(timeout=10)
    await ensure_streams(js, config)
    profile = fresh_scope()
    for partition in range(config.partitions) if before is not None else ():
        await ensure_consumer(
            js,
            names.outbound_stream,
            partition_consumer(
                names.shared_delivery_consumer(partition),
                names.shared_outbound_subject(partition),
                ack_wait_s=config.ack_wait_s,
            ),
        )
    for number, reply in enumerate(before or ()):
        envelope = OutboundEnvelope(profile, reply)
        await js.publish(
            names.shared_outbound_subject(names.partition_of_chat(profile, reply)),
            envelope.body(),
            headers=envelope.headers(f"before-{number}"),
        )
    observer = Observer()
    await client.subscribe(f"$JS.ACK.{names.outbound_stream}.>", cb=observer.on_message)
    records = DeliveryRecords(dsn)
    await records.open()
    registry = CollectorRegistry()
    metrics = ClusterMetrics.create(registry)
    reply_dead_letters = GatewayMetrics.create(registry).reply_dead_letters
    platform = Platform()
    delivery = ReplyDelivery(
        client, js, config, "test-ingress", records, metrics, reply_dead_letters
    )
    delivery.add_profile(profile, platform.deliver, ["telegram"])
    try:
        async with asyncio.TaskGroup() as tasks:
            task = tasks.create_task(delivery.run(), name="test-delivery")
            yield RunningDelivery(
                js,
                config,
                names,
                records,
                metrics,
                reply_dead_letters,
                observer,
                profile,
                platform,
            )
            delivery.stop()
            await task
    finally:
        await records.close()


async def test_a_reply_is_recorded_with_its_platform_ids_then_acknowledged(
    nats_client: Client, nats_prefix: str, postgres_dsn: str
) -> None:
    async with running_delivery(nats_client, nats_prefix, postgres_dsn) as d:
        turn = str(new_turn_id())
        await d.publish("hello", msg_id=turn, turn_id=turn)
        await d.observer.wait_for(lambda: d.acks() == 1, WAIT_S)
        assert d.platform.sent == ["hello"]
        assert await d.records.find(d.profile, turn) == DeliveryRecord(
            d.profile, turn, turn, delivered=True, platform_ids=("platform-1",)
        )
        # One the delivery layer gave up on is recorded as such (and not tried again).
        refused = str(new_turn_id())
        d.platform.give_up.add("refused")
        await d.publish("refused", msg_id=refused, turn_id=refused)
        await d.observer.wait_for(lambda: d.acks() == 2, WAIT_S)
        record = await d.records.find(d.profile, refused)
        assert record is not None
        assert (record.delivered, record.platform_ids) == (False, ())
        assert record.error == "chat 1: the platform refused it"


async def test_replies_an_earlier_version_left_on_its_shared_partitions_are_delivered(
    nats_client: Client, nats_prefix: str, postgres_dsn: str
) -> None:
    # Published before an upgrade to partitions per channel, with the consumers of then.
    earlier = [
        OutboundMessage(channel="telegram", chat_id=str(chat), content=f"from before {chat}")
        for chat in range(4)
    ]
    async with running_delivery(nats_client, nats_prefix, postgres_dsn, before=earlier) as d:
        await d.observer.wait_for(lambda: d.acks() == 4, WAIT_S)
        await d.publish("after", msg_id="after", turn_id="after")
        await d.observer.wait_for(lambda: d.acks() == 5, WAIT_S)
    assert sorted(d.platform.sent) == sorted([*(m.content for m in earlier), "after"])


async def test_a_reply_offered_again_after_its_record_is_acknowledged_unsent(
    nats_client: Client, nats_prefix: str, postgres_dsn: str
) -> None:
    async with running_delivery(nats_client, nats_prefix, postgres_dsn) as d:
        # An ingress that died after recording this reply, before acknowledging it.
        turn = str(new_turn_id())
        await d.records.record(
            DeliveryRecord(d.profile, turn, turn, delivered=True, platform_ids=("m-9",))
        )
        await d.publish("already there", msg_id=turn, turn_id=turn)
        await d.publish("next one", msg_id="next", turn_id="next")
        await d.observer.wait_for(lambda: d.acks() == 2, WAIT_S)
        assert d.platform.sent == ["next one"]  # the recorded reply was not sent again
        assert d.not_resent() == 1
        # The copy for a retried HTTP request has a message id of its own: it is sent.
        await d.publish("already there", msg_id=f"{turn}.77", turn_id=turn)
        await d.observer.wait_for(lambda: d.acks() == 3, WAIT_S)
        assert d.platform.sent == ["next one", "already there"]


async def test_a_delivery_that_broke_is_offered_again_and_recorded_once(
    nats_client: Client, nats_prefix: str, postgres_dsn: str
) -> None:
    async with running_delivery(nats_client, nats_prefix, postgres_dsn) as d:
        turn = str(new_turn_id())
        d.platform.fail_once.add("flaky")
        await d.publish("flaky", msg_id=turn, turn_id=turn)
        await d.observer.wait_for(lambda: d.acks() == 1, WAIT_S)
        naks = [s for s in d.observer.on("$JS.ACK.") if s.data.startswith(b"-NAK")]
        assert len(naks) == 1
        assert d.platform.sent == ["flaky"]
        record = await d.records.find(d.profile, turn)
        assert record is not None
        assert record.platform_ids == ("platform-1",)
        # A notice without a turn id (a dead letter's) is delivered and not recorded.
        await d.publish("set aside", msg_id="dead.5", turn_id=None)
        await d.observer.wait_for(lambda: d.acks() == 2, WAIT_S)
        assert await d.records.find(d.profile, "dead.5") is None
        assert d.platform.sent == ["flaky", "set aside"]


async def test_a_reply_given_up_on_is_a_dead_letter_whose_retry_is_delivered_once(
    nats_client: Client, nats_prefix: str, postgres_dsn: str
) -> None:
    async with running_delivery(nats_client, nats_prefix, postgres_dsn) as d:
        turn = str(new_turn_id())
        d.platform.give_up.add("refused")
        await d.publish("refused", msg_id=turn, turn_id=turn)
        await d.observer.wait_for(lambda: d.acks() == 1, WAIT_S)
        # Kept whole, with the delivery layer's reason and the platform's error, and counted.
        box = DeadLetters(d.js, d.names)
        [letter] = await box.list()
        assert letter.is_reply
        assert (letter.reason, letter.error) == ("auth", "chat 1: the platform refused it")
        assert OutboundEnvelope.decode(letter.headers, letter.body).message.content == "refused"
        assert d.kept_dead("auth") == 1
        record = await d.records.find(d.profile, turn)
        assert record is not None
        assert not record.delivered  # the delivery record as before

        # Sent again once the platform takes it: same delivery id, a deadline from now.
        d.platform.give_up.clear()
        await box.retry(letter.seq)
        await d.observer.wait_for(lambda: d.acks() == 2, WAIT_S)
        again = d.platform.handed[-1]
        assert (again.content, again.delivery_id) == ("refused", turn)
        assert isinstance(again.metadata[SENT_AGAIN_AT], float)
        assert await box.list() == []
        with pytest.raises(DeadLetterMissing):
            await box.retry(letter.seq)
        # Its delivery is recorded under the retry's own message id, as delivered.
        retried = await d.records.find(d.profile, f"retry.{turn}.{letter.seq}")
        assert retried is not None
        assert (retried.turn_id, retried.delivered) == (turn, True)
        assert d.platform.sent == ["refused", "refused"]
        assert d.kept_dead("auth") == 1


async def test_a_reply_that_cannot_be_kept_dead_is_not_recorded_and_comes_again(
    nats_client: Client, nats_prefix: str, postgres_dsn: str
) -> None:
    async with running_delivery(nats_client, nats_prefix, postgres_dsn) as d:
        # The dead-letter stream is gone (NATS refuses the copy): the reply given up on must
        # not be recorded and acknowledged, or it would be lost.
        await d.js.delete_stream(d.names.dead_stream)
        turn = str(new_turn_id())
        d.platform.give_up.add("refused")
        await d.publish("refused", msg_id=turn, turn_id=turn)
        await d.observer.wait_for(lambda: d.naks() >= 1, WAIT_S)
        assert d.acks() == 0
        assert await d.records.find(d.profile, turn) is None
        await ensure_streams(d.js, d.config)
        await d.observer.wait_for(lambda: d.acks() == 1, WAIT_S)
        [letter] = await DeadLetters(d.js, d.names).list()
        assert letter.is_reply
        assert await d.records.find(d.profile, turn) is not None
        assert d.kept_dead("auth") == 1


async def test_old_delivery_records_expire(postgres_dsn: str) -> None:
    records = DeliveryRecords(postgres_dsn)
    await records.open()
    try:
        profile = fresh_scope()
        await records.record(DeliveryRecord(profile, "old", "old", delivered=True))
        assert await records.forget_older_than(timedelta(days=7)) == 0  # young: kept
        assert await records.find(profile, "old") is not None
        assert await records.forget_older_than(timedelta(0)) >= 1
        assert await records.find(profile, "old") is None
    finally:
        await records.close()
