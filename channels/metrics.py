"""Prometheus metrics of the channel layer.

Several profiles share one registry, and prometheus_client refuses to register a metric name
twice, so the metric objects are created once per registry and every profile gets its own
label values.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from channels.loop_counters import LoopCount, LoopCounter


@dataclass(frozen=True, slots=True)
class _Families:
    #: Counted for every message sent, on the loop's thread: lock-free.
    messages_out: LoopCounter
    send_errors: Counter
    send_retries: Counter
    channel_up: Gauge
    channel_restarts: Counter
    stream_edits: Counter


_families_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, _Families] = (
    weakref.WeakKeyDictionary()
)
_families_lock = threading.Lock()


def _families_for(registry: CollectorRegistry) -> _Families:
    with _families_lock:
        families = _families_by_registry.get(registry)
        if families is None:
            families = _create_families(registry)
            _families_by_registry[registry] = families
        return families


def _create_families(registry: CollectorRegistry) -> _Families:
    channel_labels = ("profile", "channel")
    reason_labels = ("profile", "channel", "reason")
    return _Families(
        messages_out=LoopCounter(
            "octos_messages_out_total",
            "Messages (chunks) delivered to a platform.",
            channel_labels,
            registry=registry,
        ),
        send_errors=Counter(
            "octos_send_errors_total",
            "Outbound messages given up on, by reason.",
            reason_labels,
            registry=registry,
        ),
        send_retries=Counter(
            "octos_send_retries_total",
            "Platform calls tried again, by the reason of the failure.",
            reason_labels,
            registry=registry,
        ),
        channel_up=Gauge(
            "octos_channel_up",
            "1 while the channel's receiver runs, 0 while it restarts or is down.",
            channel_labels,
            registry=registry,
        ),
        channel_restarts=Counter(
            "octos_channel_restarts_total",
            "Times the supervisor restarted a channel after a failure.",
            channel_labels,
            registry=registry,
        ),
        stream_edits=Counter(
            "octos_stream_edits_total",
            "Edits of streamed messages sent to a platform.",
            channel_labels,
            registry=registry,
        ),
    )


class ChannelMetrics:
    """The channel layer's metrics for one profile."""

    def __init__(self, registry: CollectorRegistry, profile: str) -> None:
        self.registry = registry
        self.profile = profile
        self._families = _families_for(registry)
        #: channel -> its sent-messages counter (a label lookup costs more than the increment).
        self._sent: dict[str, LoopCount] = {}

    @classmethod
    def private(cls, profile: str) -> ChannelMetrics:
        """Metrics in a registry of their own, for a manager nobody scrapes."""
        return cls(CollectorRegistry(auto_describe=True), profile)

    def message_sent(self, channel: str) -> None:
        counter = self._sent.get(channel)
        if counter is None:
            counter = self._sent[channel] = self._families.messages_out.labels(
                self.profile, channel
            )
        counter.inc()

    def send_failed(self, channel: str, reason: str) -> None:
        self._families.send_errors.labels(self.profile, channel, reason).inc()

    def send_retried(self, channel: str, reason: str) -> None:
        self._families.send_retries.labels(self.profile, channel, reason).inc()

    def set_channel_up(self, channel: str, up: bool) -> None:
        self._families.channel_up.labels(self.profile, channel).set(1 if up else 0)

    def channel_restarted(self, channel: str) -> None:
        self._families.channel_restarts.labels(self.profile, channel).inc()

    def stream_edited(self, channel: str) -> None:
        self._families.stream_edits.labels(self.profile, channel).inc()
