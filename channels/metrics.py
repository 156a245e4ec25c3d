"""Prometheus metrics of the channel layer.

Several profiles share one registry, and prometheus_client refuses to register a metric name
twice, so the metric objects are created once per registry and every profile gets its own
label values.
"""

from __future__ import annotations

import bisect
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

# Counters and a histogram for the hot path, counted by the event loop's thread alone.
#
# prometheus-client's `Counter` and `Histogram` take a lock on every increment (they may be
# counted from any thread), and a turn counts several times. The counts a turn makes (messages
# in and out, turns and their latency) are all made on the loop's thread, so here they are plain
# numbers, read by the registry through prometheus-client's custom collector interface when it
# is scraped. What is exposed is what a `Counter` or a `Histogram` of the same name exposes
# (`_total` and `_created`; `_bucket`, `_count`, `_sum` and `_created`), as
# tests/channels/test_loop_counters.py checks against prometheus-client's own.
#
# Only the loop's thread may count; a scrape may run on any thread (reading a number is atomic
# under the GIL, and a histogram's buckets are read one by one, as prometheus-client reads its
# own).
S = TypeVar("S")


class LoopCount:
    """One labelled series of a `LoopCounter`."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up; {amount} would take it down")
        self.value += amount


class _LoopFamily(Collector, Generic[S]):
    """A family of series by label values, registered with its registry."""

    #: What a name may end with that the exposition adds itself (a counter's `_total`).
    _exposition_suffix = ""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        registry: CollectorRegistry,
    ) -> None:
        self._name = name.removesuffix(self._exposition_suffix) if self._exposition_suffix else name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._series: dict[tuple[str, ...], S] = {}
        registry.register(self)

    def labels(self, *values: str) -> S:
        """The series of these label values (keep it: the lookup costs more than a count)."""
        series = self._series.get(values)
        if series is None:
            if len(values) != len(self._labelnames):
                raise ValueError(f"{self._name} takes the labels {self._labelnames}, got {values}")
            series = self._series[values] = self._new_series()
        return series

    def _new_series(self) -> S:
        raise NotImplementedError


class LoopCounter(_LoopFamily[LoopCount]):
    """A counter family: `labels(...)` gives a series, `inc()` counts on it."""

    _exposition_suffix = "_total"

    def _new_series(self) -> LoopCount:
        return LoopCount()

    def describe(self) -> Iterable[Metric]:
        yield CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)
        for values, series in list(self._series.items()):
            family.add_metric(values, series.value, created=series.created)
        yield family


class LoopObservations:
    """One labelled series of a `LoopHistogram`."""

    __slots__ = ("_upper_bounds", "counts", "created", "sum")

    def __init__(self, upper_bounds: Sequence[float]) -> None:
        self._upper_bounds = upper_bounds
        #: Per bucket, not cumulative; the last is +Inf.
        self.counts = [0] * (len(upper_bounds) + 1)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        # The first bucket whose upper bound is at least `amount` (an upper bound is inclusive).
        self.counts[bisect.bisect_left(self._upper_bounds, amount)] += 1
        self.sum += amount


class LoopHistogram(_LoopFamily[LoopObservations]):
    """A histogram family with fixed buckets: `labels(...)` gives a series, `observe()`."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = sorted(float(bound) for bound in buckets if bound != float("inf"))
        if not bounds:
            raise ValueError(f"{name} needs at least one finite bucket")
        self._upper_bounds = tuple(bounds)
        super().__init__(name, documentation, labelnames, registry=registry)

    def _new_series(self) -> LoopObservations:
        return LoopObservations(self._upper_bounds)

    def describe(self) -> Iterable[Metric]:
        yield HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)
        edges = [_bucket_label(bound) for bound in self._upper_bounds] + ["+Inf"]
        for values, series in list(self._series.items()):
            cumulative, buckets = 0, []
            for edge, count in zip(edges, list(series.counts), strict=True):
                cumulative += count
                buckets.append((edge, float(cumulative)))
            family.add_metric(values, buckets, series.sum)
            family.samples.append(
                Sample(
                    f"{self._name}_created",
                    dict(zip(self._labelnames, values, strict=True)),
                    series.created,
                )
            )
        yield family


def _bucket_label(bound: float) -> str:
    """A bucket's `le` label as prometheus-client writes its own (`0.005`, `1.0`, `+Inf`)."""
    label: str = floatToGoString(bound)  # type: ignore[no-untyped-call]  # untyped upstream
    return label


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
