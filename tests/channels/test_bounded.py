"""The bounded memory of recent keys: newest last, the oldest dropped past the capacity."""

from __future__ import annotations

import pytest

from channels.lifecycle.bounded import RecentMap


def test_the_oldest_entries_are_dropped_and_returned() -> None:
    recent: RecentMap[str, int] = RecentMap(2)
    assert recent.remember("a", 1) == []
    assert recent.remember("b", 2) == []
    assert recent.remember("c", 3) == [("a", 1)]
    assert list(recent.items()) == [("b", 2), ("c", 3)]


def test_setting_a_key_again_makes_it_the_newest() -> None:
    recent: RecentMap[str, int] = RecentMap(2)
    recent.remember("a", 1)
    recent.remember("b", 2)
    recent.remember("a", 10)
    assert recent.remember("c", 3) == [("b", 2)]
    assert dict(recent) == {"a": 10, "c": 3}


def test_a_capacity_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        RecentMap[str, int](0)
