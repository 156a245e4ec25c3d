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

`ClusterNames` names one cluster's streams, subjects and consumers (streams and subjects start with
its `stream_prefix`) and finds a chat's partition. A chat's partition is a stable hash (BLAKE2b,
the same in every process and every Python) of its session base key, modulo `partitions`: its turns
and deliveries keep their order within it. Subject tokens carry only the prefix (validated:
letters, digits, `_`, `-`), fixed words, channel names (a name that is not lowercase letters,
digits and `-` goes as a hash), numbers and hex ids, never a platform's chat id or a profile
name, so no `.`, `*` or `>` can reach a subject.

Replies are partitioned per channel: a reply is delivered one at a time in its partition, and
one whose platform is down is tried until its delivery deadline, so it holds its partition;
with a partition of its own channel it holds back no other channel's replies. An ingress makes
the delivery consumers of the channels its profiles run. The replies of a version before this
(`{prefix}.out.{n}`, consumer `delivery-{n}`) are still delivered where that consumer exists.

    {prefix}.in.{n}          inbound messages of partition n        stream {prefix}_IN
    {prefix}.out.{ch}.{n}    replies to channel ch's chats of n     stream {prefix}_OUT
    {prefix}.reply.{ingress} replies to requests one ingress holds  stream {prefix}_OUT
    {prefix}.dead.{n}        dead letters                           stream {prefix}_DEAD
    {prefix}.status          turn status (core NATS, not stored)
    {prefix}.live.{ingress}  a turn's snapshots, typing and reactions, a tap's used buttons, and
                             its reply handed over to the ingress showing them (core NATS, not
                             stored; `gateway.cluster.live`)
    {prefix}.cancel          cancel a chat's running turn (core NATS, not stored)

A partition's consumer holds one message at a time, and a work-queue stream allows no second
consumer on its subject, so what waits behind it is read without a consumer, oldest first, by
sequence (`get_msg`, the next message on the subject from a sequence on): what waits behind a
worker's message (`chat_queue`), and the replies of a chat not delivered yet (`live`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Generic, Protocol, TypeVar

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RawStreamMsg,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from bus import SessionKey
from config.bus import NatsConfig


def partition_of(base_key: str, partitions: int) -> int:
    """The partition of a session base key: stable across processes, machines and versions."""
    digest = hashlib.blake2b(base_key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


_PLAIN_CHANNEL = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")


def channel_token(channel: str) -> str:
    """A channel's name as a subject token and consumer name part: itself when it is plain,
    else `x` and a hash of it (a plugin's name may hold anything)."""
    if _PLAIN_CHANNEL.match(channel):
        return channel
    return "x" + hashlib.blake2b(channel.encode("utf-8"), digest_size=8).hexdigest()


def chat_base_key(profile: str, channel: str, chat_id: str) -> str:
    """The base key of a chat's sessions (topics of one chat share it, and its partition)."""
    return SessionKey.for_chat(profile, channel, chat_id).base_key()


class InChat(Protocol):
    """Anything that names one chat: an `InboundMessage`, an `OutboundMessage`."""

    @property
    def channel(self) -> str: ...

    @property
    def chat_id(self) -> str: ...


KeyT = TypeVar("KeyT", int, str)


@dataclass(frozen=True)
class _Template:
    """A name of a cluster's streams, subjects or consumers as its template: `{prefix}` stands
    for the cluster's stream prefix."""

    template: str


class _Name(_Template):
    def __get__(self, names: ClusterNames, owner: object) -> str:
        return self.template.format(prefix=names.prefix)


class _NameOf(_Template, Generic[KeyT]):
    """A name per partition or per ingress process: `{}` stands for either."""

    def __get__(self, names: ClusterNames, owner: object) -> Callable[[KeyT], str]:
        return partial(self.template.format, prefix=names.prefix)


@dataclass(frozen=True, slots=True)
class ClusterNames:
    # One line per stream, subject and consumer name, with its template: each is a name to
    # grep, and the module's table of subjects is here as code.
    prefix: str
    partitions: int

    inbound_stream = _Name("{prefix}_IN")
    outbound_stream = _Name("{prefix}_OUT")
    dead_stream = _Name("{prefix}_DEAD")
    status_subject = _Name("{prefix}.status")
    cancel_subject = _Name("{prefix}.cancel")
    #: Every inbound partition's subject, as one subscription's wildcard.
    inbound_subjects = _Name("{prefix}.in.*")
    inbound_subject = _NameOf[int]("{prefix}.in.{}")
    #: Replies of all channels in one partition, as versions before per-channel partitions
    #: published them: delivered still, where their consumer (`shared_delivery_consumer`) is.
    shared_outbound_subject = _NameOf[int]("{prefix}.out.{}")
    #: Where replies to requests held open by one ingress process go (the HTTP API).
    reply_subject = _NameOf[str]("{prefix}.reply.{}")
    #: Where one ingress process hears the live events of the turns it shows.
    live_subject = _NameOf[str]("{prefix}.live.{}")
    dead_subject = _NameOf[int]("{prefix}.dead.{}")
    worker_consumer = _NameOf[int]("worker-{}")
    shared_delivery_consumer = _NameOf[int]("delivery-{}")
    reply_consumer = _NameOf[str]("reply-{}")

    def partition_of_chat(self, profile: str, message: InChat) -> int:
        """The partition of the message's chat: an inbound message and its replies share it."""
        return partition_of(
            chat_base_key(profile, message.channel, message.chat_id), self.partitions
        )

    def outbound_subject(self, channel: str, partition: int) -> str:
        return f"{self.prefix}.out.{channel_token(channel)}.{partition}"

    def delivery_consumer(self, channel: str, partition: int) -> str:
        return f"delivery-{channel_token(channel)}-{partition}"

    def outbound_subject_of(self, profile: str, reply: InChat) -> str:
        """Where a reply to the chat of `reply` is published."""
        return self.outbound_subject(reply.channel, self.partition_of_chat(profile, reply))

    def partition_of_subject(self, subject: str) -> int:
        """The partition number a partitioned subject ends with."""
        return int(subject.rsplit(".", 1)[1])


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
            subjects=[f"{prefix}.out.*", f"{prefix}.out.*.*", f"{prefix}.reply.*"],
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


async def ensure_delivery_consumers(js: JetStreamContext, config: NatsConfig, channel: str) -> None:
    """The delivery consumers of one channel's replies, a partition each."""
    names = names_of(config)
    await _ensure_partition_consumers(
        js,
        config,
        names.outbound_stream,
        partial(names.delivery_consumer, channel),
        partial(names.outbound_subject, channel),
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
