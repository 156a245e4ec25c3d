"""The hot path's lock-free counters expose what prometheus-client's own would."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from channels.metrics import LoopCounter, LoopHistogram

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OBSERVED = (0.001, 0.005, 0.0051, 0.3, 1.0, 7.5, 119.0, 500.0)


def exposition(registry: CollectorRegistry) -> str:
    """The text a scrape gets, with the `_created` timestamps (the time a series was made)
    written as a placeholder."""
    text = generate_latest(registry).decode()
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 <time>", text)


def test_a_counter_exposes_what_prometheus_clients_counter_does() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counter = LoopCounter(
        "octos_turns", "Agent turns by result", ["profile", "result"], registry=ours
    )
    reference = Counter(
        "octos_turns", "Agent turns by result", ["profile", "result"], registry=theirs
    )
    for labels, times in ((("main", "ok"), 3), (("main", "agent_error"), 1), (("work", "ok"), 2)):
        series, expected = counter.labels(*labels), reference.labels(*labels)
        for _ in range(times):
            series.inc()
            expected.inc()
    assert exposition(ours) == exposition(theirs)
    assert ours.get_sample_value("octos_turns_total", {"profile": "main", "result": "ok"}) == 3


def test_a_histogram_exposes_what_prometheus_clients_histogram_does() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    histogram = LoopHistogram(
        "octos_turn_latency_seconds", "Turn time", ["profile"], buckets=BUCKETS, registry=ours
    )
    reference = Histogram(
        "octos_turn_latency_seconds", "Turn time", ["profile"], buckets=BUCKETS, registry=theirs
    )
    for value in OBSERVED:
        histogram.labels("main").observe(value)
        reference.labels("main").observe(value)
    assert exposition(ours) == exposition(theirs)


def test_an_unused_family_is_described_but_has_no_series() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    LoopCounter("octos_messages_in", "Inbound", ["channel"], registry=ours)
    Counter("octos_messages_in", "Inbound", ["channel"], registry=theirs)
    assert exposition(ours) == exposition(theirs)


def test_a_name_is_registered_once() -> None:
    registry = CollectorRegistry()
    LoopCounter("octos_turns", "Agent turns", ["profile"], registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        Counter("octos_turns", "Agent turns", ["profile"], registry=registry)


def test_the_wrong_number_of_labels_is_refused() -> None:
    counter = LoopCounter(
        "octos_turns", "Agent turns", ["profile", "result"], registry=CollectorRegistry()
    )
    with pytest.raises(ValueError, match="takes the labels"):
        counter.labels("main")


def test_a_counter_only_goes_up() -> None:
    counter = LoopCounter("octos_turns", "Agent turns", ["profile"], registry=CollectorRegistry())
    with pytest.raises(ValueError, match="only goes up"):
        counter.labels("main").inc(-1)
