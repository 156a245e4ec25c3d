"""The daemon's own Prometheus metrics; the channel manager keeps the delivery ones."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from channels.metrics import LoopCounter, LoopHistogram

_LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_APPEND_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


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
    session_append_latency: Histogram
    #: Replies given up on and kept as dead letters (`gateway.daemon.reply_dead_letters`).
    reply_dead_letters: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> GatewayMetrics:
        return cls(
            registry=registry,
            messages_in=LoopCounter(
                "octos_messages_in",
                "Inbound messages by what the dispatcher did with them",
                ["profile", "channel", "outcome"],
                registry=registry,
            ),
            turns=LoopCounter(
                "octos_turns",
                "Agent turns by agent and result",
                ["profile", "agent", "result"],
                registry=registry,
            ),
            agent_tokens=LoopCounter(
                "octos_agent_tokens",
                "Tokens the agents' turns used, by agent and kind",
                ["profile", "agent", "kind"],
                registry=registry,
            ),
            turn_latency=LoopHistogram(
                "octos_turn_latency_seconds",
                "Time from a turn's start to its durable final reply",
                ["profile"],
                buckets=_LATENCY_BUCKETS_S,
                registry=registry,
            ),
            queue_depth=Gauge(
                "octos_queue_depth",
                "Messages waiting on the bus, by direction",
                ["profile", "direction"],
                registry=registry,
            ),
            session_append_latency=Histogram(
                "octos_session_append_seconds",
                "Time until a session append is durable",
                ["profile"],
                buckets=_APPEND_BUCKETS_S,
                registry=registry,
            ),
            reply_dead_letters=Counter(
                "octos_reply_dead_letters",
                "Replies given up on and kept as dead letters, by channel and reason",
                ["profile", "channel", "reason"],
                registry=registry,
            ),
        )
