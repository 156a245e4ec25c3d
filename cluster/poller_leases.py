"""The poller leases of one ingress process: the bucket, the holder id and the gauge, bound once.

An ingress opens it once at start-up and gives each profile's channel manager
`run_channel=leases.for_profile(profile)`; a single-poller channel then starts only while this
process holds its lease. The NATS connection is the caller's (the cluster's node owns it).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.kv import KeyValue
from prometheus_client import CollectorRegistry, Gauge

from channels.leased import LeasedChannels
from cluster.lease import (
    DEFAULT_RENEW_S,
    DEFAULT_TTL_S,
    PollerLease,
    held_leases_gauge,
    open_lease_bucket,
)


def default_holder() -> str:
    """Who holds a lease, as operators read it in the bucket: host, pid and a random tail
    (a restarted process with the same pid is another holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# What every lease of this process is made with, bound once: a plain record (any settings
# dataclass reads alike), its defaults the lease's own.
@dataclass(frozen=True, slots=True)
class PollerLeases:
    kv: KeyValue
    holder: str
    gauge: Gauge
    ttl_s: float = DEFAULT_TTL_S
    renew_s: float = DEFAULT_RENEW_S

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        stream_prefix: str,
        registry: CollectorRegistry,
        *,
        replicas: int = 1,
        holder: str | None = None,
    ) -> PollerLeases:
        """Once per process: the gauge is registered in `registry` here."""
        kv = await open_lease_bucket(js, stream_prefix, replicas=replicas)
        return cls(kv, holder or default_holder(), held_leases_gauge(registry))

    def lease(self, key: str) -> PollerLease:
        return PollerLease(
            self.kv, key, self.holder, ttl_s=self.ttl_s, renew_s=self.renew_s, gauge=self.gauge
        )

    def for_profile(self, profile: str) -> LeasedChannels:
        return LeasedChannels(profile, self.lease)
