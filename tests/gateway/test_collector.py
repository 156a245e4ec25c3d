"""The collector while the daemon serves: start-up frozen, young collections spaced out,
survivors frozen instead of scanned again, a full collection when the frozen set grows."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from gateway.daemon import collector
from gateway.daemon.collector import NEVER, YOUNG_THRESHOLD, keep_settled, settle_after_start_up


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    gc.collect()


class Ticks:
    """`keep_settled`'s sleep: each tick runs only when the test lets it."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self._go = asyncio.Event()

    async def sleep(self, _seconds: float) -> None:
        self.asked.set()
        await self._go.wait()
        self._go.clear()

    async def tick(self) -> None:
        """Let one sleep end, and wait until the keeper asks for the next."""
        await self.asked.wait()
        self.asked.clear()
        self._go.set()
        await self.asked.wait()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_start_up_objects_are_frozen_and_only_young_collections_are_scheduled() -> None:
    survivor = [object() for _ in range(100)]
    frozen = settle_after_start_up()
    assert frozen == gc.get_freeze_count()
    assert frozen >= len(survivor)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, NEVER, NEVER)


async def test_survivors_are_frozen_at_each_tick() -> None:
    settle_after_start_up()
    ticks = Ticks()
    keeper = asyncio.create_task(keep_settled(sleep=ticks.sleep), name="test-keeper")
    try:
        await ticks.asked.wait()
        before = gc.get_freeze_count()
        survivors = [[index] for index in range(1_000)]
        await ticks.tick()
        assert gc.get_freeze_count() >= before + len(survivors)
        assert gc.get_count()[0] < len(survivors)  # the young generation starts over
    finally:
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)


async def test_cyclic_garbage_frozen_with_the_survivors_is_freed_once_the_frozen_set_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(collector, "FREEZES_PER_COUNT", 1)
    settle_after_start_up()
    ticks = Ticks()
    keeper = asyncio.create_task(keep_settled(sleep=ticks.sleep), name="test-keeper")
    try:
        await ticks.asked.wait()
        garbage = Cycle()
        freed = weakref.ref(garbage)
        await ticks.tick()  # frozen while alive; the frozen set has not grown by a quarter
        del garbage
        assert freed() is not None  # a cycle: only a collection frees it, and it is frozen
        gc.collect()
        assert freed() is not None
        # The frozen set grows by more than a quarter: the next count makes a full collection.
        growth = [[index] for index in range(gc.get_freeze_count() // 3)]
        await ticks.tick()
        assert freed() is None
        assert gc.get_freeze_count() >= len(growth)
    finally:
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
