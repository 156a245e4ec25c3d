"""Inbound de-duplication: bounded in size and in age."""

from __future__ import annotations

import pytest

from channels.lifecycle.bounded import InboundDedup
from tests.channels.conftest import FakeClock


def test_a_repeat_within_the_ttl_is_seen(clock: FakeClock) -> None:
    dedup = InboundDedup(ttl_s=600.0, clock=clock)

    assert dedup.seen("telegram:1") is False
    clock.advance(599)
    assert dedup.seen("telegram:1") is True
    assert dedup.seen("discord:1") is False


def test_a_repeat_after_the_ttl_is_new_again(clock: FakeClock) -> None:
    dedup = InboundDedup(ttl_s=60.0, clock=clock)
    dedup.seen("telegram:1")

    clock.advance(60)

    assert "telegram:1" not in dedup
    assert dedup.seen("telegram:1") is False
    assert dedup.seen("telegram:1") is True


def test_a_repeat_does_not_extend_the_lifetime(clock: FakeClock) -> None:
    dedup = InboundDedup(ttl_s=60.0, clock=clock)
    dedup.seen("k")
    clock.advance(50)
    assert dedup.seen("k") is True

    clock.advance(10)

    assert dedup.seen("k") is False


def test_size_is_bounded_and_the_oldest_goes_first(clock: FakeClock) -> None:
    dedup = InboundDedup(max_entries=3, clock=clock)
    for key in ("a", "b", "c", "d"):
        dedup.seen(key)
        clock.advance(1)

    assert len(dedup) == 3
    assert "a" not in dedup
    assert dedup.seen("d") is True
    assert dedup.seen("a") is False


def test_expired_entries_are_dropped_as_time_passes(clock: FakeClock) -> None:
    dedup = InboundDedup(max_entries=10_000, ttl_s=10.0, clock=clock)
    for n in range(1000):
        dedup.seen(f"k{n}")

    clock.advance(11)
    dedup.seen("fresh")

    assert len(dedup) == 1


@pytest.mark.parametrize(("max_entries", "ttl_s"), [(0, 1.0), (10, 0.0)])
def test_rejects_nonsense_bounds(max_entries: int, ttl_s: float) -> None:
    with pytest.raises(ValueError, match="must be"):
        InboundDedup(max_entries=max_entries, ttl_s=ttl_s)
