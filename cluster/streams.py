"""The cluster's streams and durable consumers, created (or brought up to date) idempotently.

    {prefix}_IN    work queue: inbound messages, one worker consumer per partition
    {prefix}_OUT   work queue: replies, one delivery consumer per partition, and one consumer
                   per ingress process for replies to the requests it holds open
    {prefix}_DEAD  limits: dead letters, kept until retried or purged

File storage; the duplicate window is the configured one. A work queue removes a message once
it is acknowledged, so what is left in a stream is what is still to do.

Every process of a cluster runs this at its start, often at the same moment. A stream is
updated only when its settings differ: NATS 2.9 was seen to leave unanswered a create, an
update or an info of a stream that another process was creating at that moment, and the caller
must then ask again (the node's join does), so the fewer such requests the better.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from cluster.subjects import ClusterNames
from config.bus import NatsConfig

UNLIMITED = -1
#: How long the consumer of an ingress process that died (and its replies) lingers.
REPLY_CONSUMER_IDLE_S = 300.0
#: Replies to requests whose ingress died are dropped after this (their clients retried).
OUTBOUND_MAX_AGE_S = 7 * 24 * 3600.0


def names_of(config: NatsConfig) -> ClusterNames:
    return ClusterNames(config.stream_prefix, config.partitions)


def stream_configs(config: NatsConfig) -> list[StreamConfig]:
    """The inbound, outbound and dead-letter streams as `config` makes them."""
    names = names_of(config)
    prefix = config.stream_prefix
    common = {
        "storage": StorageType.FILE,
        "num_replicas": config.replicas,
        "duplicate_window": config.duplicate_window_s,
    }
    return [
        StreamConfig(
            name=names.inbound_stream,
            description="octos-gateway inbound messages, by partition",
            subjects=[names.inbound_subjects],
            retention=RetentionPolicy.WORK_QUEUE,
            **common,  # type: ignore[arg-type]
        ),
        StreamConfig(
            name=names.outbound_stream,
            description="octos-gateway replies, by partition and by waiting ingress",
            subjects=[f"{prefix}.out.*", f"{prefix}.reply.*"],
            retention=RetentionPolicy.WORK_QUEUE,
            max_age=OUTBOUND_MAX_AGE_S,
            **common,  # type: ignore[arg-type]
        ),
        StreamConfig(
            name=names.dead_stream,
            description="octos-gateway dead letters: inbound messages that kept failing, "
            "replies given up on",
            subjects=[f"{prefix}.dead.*"],
            retention=RetentionPolicy.LIMITS,
            **common,  # type: ignore[arg-type]
        ),
    ]


async def ensure_streams(js: JetStreamContext, config: NatsConfig) -> None:
    """Create the missing streams (those a failed start left out too), and update those whose
    settings differ from this config (subjects, replicas, window)."""
    for stream in stream_configs(config):
        assert stream.name is not None
        try:
            info = await js.stream_info(stream.name)
        except NotFoundError:
            await js.add_stream(stream)
        else:
            if not _has_settings(info.config, stream):
                await js.update_stream(stream)


def _has_settings(current: StreamConfig, wanted: StreamConfig) -> bool:
    """Whether the server's stream has every setting `wanted` makes (its unset ones aside)."""
    return all(
        getattr(current, field.name) == value
        for field in dataclasses.fields(wanted)
        if (value := getattr(wanted, field.name)) is not None
    )


def partition_consumer(durable: str, subject: str, *, ack_wait_s: float) -> ConsumerConfig:
    """One partition's consumer: one message in flight cluster-wide keeps the chat's order.

    JetStream never stops offering a message (`max_deliver` unlimited). An inbound one: the
    worker counts deliveries and buries it itself; with JetStream's own limit, a worker killed
    during the last delivery would leave it in the stream, neither answered nor buried. A
    reply: it is offered until an ingress delivers it (or the delivery layer gives up on it),
    and nothing else would ever send it.
    """
    return ConsumerConfig(
        durable_name=durable,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=1,
        max_deliver=UNLIMITED,
        filter_subject=subject,
    )


async def ensure_consumer(js: JetStreamContext, stream: str, consumer: ConsumerConfig) -> None:
    """Create a durable consumer; an existing one is left as it is (its state is the point)."""
    assert consumer.durable_name is not None
    try:
        await js.consumer_info(stream, consumer.durable_name)
    except NotFoundError:
        await js.add_consumer(stream, consumer)


async def ensure_worker_consumers(js: JetStreamContext, config: NatsConfig) -> None:
    names = names_of(config)
    await _ensure_partition_consumers(
        js, config, names.inbound_stream, names.worker_consumer, names.inbound_subject
    )


async def ensure_delivery_consumers(js: JetStreamContext, config: NatsConfig) -> None:
    names = names_of(config)
    await _ensure_partition_consumers(
        js, config, names.outbound_stream, names.delivery_consumer, names.outbound_subject
    )


async def _ensure_partition_consumers(
    js: JetStreamContext,
    config: NatsConfig,
    stream: str,
    durable_of: Callable[[int], str],
    subject_of: Callable[[int], str],
) -> None:
    # All at once: each new one is a round of JetStream's consensus (a replicated consumer),
    # and one after another they take seconds at a cluster's first start.
    outcomes = await asyncio.gather(
        *(
            ensure_consumer(
                js,
                stream,
                partition_consumer(
                    durable_of(partition), subject_of(partition), ack_wait_s=config.ack_wait_s
                ),
            )
            for partition in range(config.partitions)
        ),
        return_exceptions=True,
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


def reply_consumer(names: ClusterNames, ingress_id: str, config: NatsConfig) -> ConsumerConfig:
    """The consumer of one ingress process's held requests; gone a while after the process."""
    return ConsumerConfig(
        durable_name=names.reply_consumer(ingress_id),
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=config.ack_wait_s,
        max_deliver=UNLIMITED,
        filter_subject=names.reply_subject(ingress_id),
        inactive_threshold=REPLY_CONSUMER_IDLE_S,
    )
