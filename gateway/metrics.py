"""The daemon's own Prometheus metrics; the channel manager keeps the delivery ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from channels.metrics import LoopCounter, LoopHistogram

_LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_APPEND_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)

F = TypeVar("F")


@dataclass(frozen=True, slots=True)
class GatewayMetrics:
    """Metric families shared by every profile; each series is labelled with its profile."""

    registry: CollectorRegistry
    # Counted a few times a turn, on the loop's thread: lock-free (see channels.metrics).
    messages_in: LoopCounter
    turns: LoopCounter
    #: Tokens the agents' turns used, by agent and kind (input, output).
    agent_tokens: LoopCounter
    turn_latency: LoopHistogram
    queue_depth: Gauge
    #: Replies waiting on the bus for a place (`bus.replies_per_channel`), by channel.
    replies_waiting: Gauge
    session_append_latency: Histogram
    #: Replies given up on and kept as dead letters (`gateway.daemon.reply_dead_letters`).
    reply_dead_letters: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> GatewayMetrics:
        def family(
            kind: Callable[..., F], name: str, documentation: str, *labels: str, **options: Any
        ) -> F:
            """A family in `registry`, its series labelled by profile, then by `labels`."""
            return kind(name, documentation, ("profile", *labels), registry=registry, **options)

        return cls(
            registry=registry,
            messages_in=family(
                LoopCounter,
                "octos_messages_in",
                "Inbound messages by what the dispatcher did with them",
                "channel",
                "outcome",
            ),
            turns=family(
                LoopCounter, "octos_turns", "Agent turns by agent and result", "agent", "result"
            ),
            agent_tokens=family(
                LoopCounter,
                "octos_agent_tokens",
                "Tokens the agents' turns used, by agent and kind",
                "agent",
                "kind",
            ),
            turn_latency=family(
                LoopHistogram,
                "octos_turn_latency_seconds",
                "Time from a turn's start to its durable final reply",
                buckets=_LATENCY_BUCKETS_S,
            ),
            queue_depth=family(
                Gauge, "octos_queue_depth", "Messages waiting on the bus, by direction", "direction"
            ),
            replies_waiting=family(
                Gauge,
                "octos_replies_waiting",
                "Replies waiting for their channel to deliver earlier ones (its platform down, "
                "say), by channel",
                "channel",
            ),
            session_append_latency=family(
                Histogram,
                "octos_session_append_seconds",
                "Time until a session append is durable",
                buckets=_APPEND_BUCKETS_S,
            ),
            reply_dead_letters=family(
                Counter,
                "octos_reply_dead_letters",
                "Replies given up on and kept as dead letters, by channel and reason",
                "channel",
                "reason",
            ),
        )
