"""Once the profiles run, start-up's objects are frozen and young collections spaced out."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.collector import YOUNG_THRESHOLD, settle_after_start_up


@pytest.fixture
def collector_restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("collector_restored")
def test_start_up_objects_are_frozen_and_young_collections_spaced_out() -> None:
    _young, middle, old = gc.get_threshold()
    survivor = [object() for _ in range(100)]
    frozen = settle_after_start_up()
    assert frozen == gc.get_freeze_count()
    assert frozen >= len(survivor)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)
