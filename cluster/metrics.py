"""Prometheus metrics of the cluster's own work: dead letters, redeliveries, replays, replies
recognised as delivered, and replies handed to the ingress showing their turn."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter


# Declared as `gateway.metrics.GatewayMetrics` is, on purpose: each part's own families, made
# once on the process's registry by `create`.
@dataclass(frozen=True, slots=True)
class ClusterMetrics:
    dead_letters: Counter
    redeliveries: Counter
    replayed_replies: Counter
    dropped_duplicates: Counter
    replies_not_resent: Counter
    replies_handed_over: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> ClusterMetrics:
        def per_profile(name: str, documentation: str) -> Counter:
            return Counter(name, documentation, ["profile"], registry=registry)

        return cls(
            dead_letters=Counter(
                "octos_dead_letters",
                "Inbound messages moved to the dead-letter stream, by reason",
                ["profile", "reason"],
                registry=registry,
            ),
            redeliveries=per_profile(
                "octos_redeliveries",
                "Inbound messages a worker received again (a crash, a timeout, a retry)",
            ),
            replayed_replies=per_profile(
                "octos_replayed_replies", "Stored replies published again instead of recomputed"
            ),
            dropped_duplicates=per_profile(
                "octos_dropped_duplicates",
                "Platform retries recognised by their inbound id and not answered again",
            ),
            replies_not_resent=per_profile(
                "octos_replies_not_resent",
                "Replies offered again whose delivery was recorded already: acknowledged, "
                "not sent twice",
            ),
            replies_handed_over=per_profile(
                "octos_replies_handed_over",
                "Replies handed to the ingress that showed their turn's snapshots and typing, "
                "which delivered them in the message it was editing",
            ),
        )
