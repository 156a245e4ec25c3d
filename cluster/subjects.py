"""Stream, subject and consumer names of one cluster (`stream_prefix`), and partitioning.

A chat's partition is a stable hash (BLAKE2b, the same in every process and every Python) of its
session base key, modulo `partitions`: its turns and deliveries keep their order within it.
Subject tokens carry only the prefix (validated: letters, digits, `_`, `-`), fixed words,
numbers and hex ids, never a platform's chat id or a profile name, so no `.`, `*` or `>` can
reach a subject.

    {prefix}.in.{n}          inbound messages of partition n        stream {prefix}_IN
    {prefix}.out.{n}         replies to chats of partition n        stream {prefix}_OUT
    {prefix}.reply.{ingress} replies to requests one ingress holds  stream {prefix}_OUT
    {prefix}.dead.{n}        dead letters                           stream {prefix}_DEAD
    {prefix}.status          turn status (core NATS, not stored)
    {prefix}.live.{ingress}  a turn's snapshots and typing, and its reply handed over to the
                             ingress showing them (core NATS, not stored; `cluster.live`)
    {prefix}.cancel          cancel a chat's running turn (core NATS, not stored)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

from bus import SessionKey


def partition_of(base_key: str, partitions: int) -> int:
    """The partition of a session base key: stable across processes, machines and versions."""
    digest = hashlib.blake2b(base_key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


def chat_base_key(profile: str, channel: str, chat_id: str) -> str:
    """The base key of a chat's sessions (topics of one chat share it, and its partition)."""
    return SessionKey.for_chat(profile, channel, chat_id).base_key()


class InChat(Protocol):
    """Anything that names one chat: an `InboundMessage`, an `OutboundMessage`."""

    @property
    def channel(self) -> str: ...

    @property
    def chat_id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class ClusterNames:
    # One member per stream, subject and consumer name, alike on purpose: each is a name to grep.
    prefix: str
    partitions: int

    @property
    def inbound_stream(self) -> str:
        return f"{self.prefix}_IN"

    @property
    def outbound_stream(self) -> str:
        return f"{self.prefix}_OUT"

    @property
    def dead_stream(self) -> str:
        return f"{self.prefix}_DEAD"

    @property
    def status_subject(self) -> str:
        return f"{self.prefix}.status"

    @property
    def cancel_subject(self) -> str:
        return f"{self.prefix}.cancel"

    @property
    def inbound_subjects(self) -> str:
        """Every inbound partition's subject, as one subscription's wildcard."""
        return f"{self.prefix}.in.*"

    def inbound_subject(self, partition: int) -> str:
        return f"{self.prefix}.in.{partition}"

    def outbound_subject(self, partition: int) -> str:
        return f"{self.prefix}.out.{partition}"

    def reply_subject(self, ingress_id: str) -> str:
        """Where replies to requests held open by one ingress process go (the HTTP API)."""
        return f"{self.prefix}.reply.{ingress_id}"

    def live_subject(self, ingress_id: str) -> str:
        """Where one ingress process hears the live events of the turns it shows."""
        return f"{self.prefix}.live.{ingress_id}"

    def dead_subject(self, partition: int) -> str:
        return f"{self.prefix}.dead.{partition}"

    def worker_consumer(self, partition: int) -> str:
        return f"worker-{partition}"

    def delivery_consumer(self, partition: int) -> str:
        return f"delivery-{partition}"

    def reply_consumer(self, ingress_id: str) -> str:
        return f"reply-{ingress_id}"

    def partition_of_chat(self, profile: str, message: InChat) -> int:
        """The partition of the message's chat: an inbound message and its replies share it."""
        return partition_of(
            chat_base_key(profile, message.channel, message.chat_id), self.partitions
        )

    def partition_of_subject(self, subject: str) -> int:
        """The partition number a partitioned subject ends with."""
        return int(subject.rsplit(".", 1)[1])
