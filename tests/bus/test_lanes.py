"""Keyed lanes: one item at a time per key in arrival order, keys concurrent, a lane gone once
empty (or once its task stops), the take strategy a subclass chooses."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from bus.lanes import KeyedLanes, Lane


@dataclass(eq=False)
class RecordingLane(Lane[str]):
    ran: list[str] = field(default_factory=list)


class Recorder(KeyedLanes[str, str, RecordingLane]):
    """Runs an item by waiting for its gate (set by the test), then recording it."""

    def __init__(
        self, tasks: asyncio.TaskGroup, take: Callable[[deque[str]], str] = deque.popleft
    ) -> None:
        super().__init__(take)
        self._tasks = tasks
        self.gates: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.order: list[tuple[str, str]] = []
        self.closed: list[str] = []

    def submit(self, key: str, item: str) -> RecordingLane:
        lane = self._lanes.get(key) or self._open(key, self._tasks, f"test:{key}")
        lane.pending.append(item)
        self.gates.setdefault(item, asyncio.Event())
        self.started.setdefault(item, asyncio.Event())
        return lane

    def _new_lane(self) -> RecordingLane:
        return RecordingLane()

    async def _run(self, key: str, lane: RecordingLane, item: str) -> None:
        self.started[item].set()
        await self.gates[item].wait()
        if item.startswith("boom"):
            raise RuntimeError(item)
        lane.ran.append(item)
        self.order.append((key, item))

    def _closed(self, key: str) -> None:
        self.closed.append(key)


async def test_a_key_runs_its_items_one_at_a_time_in_order_while_other_keys_proceed() -> None:
    async with asyncio.TaskGroup() as tasks:
        lanes = Recorder(tasks)
        lanes.submit("a", "a1")
        lanes.submit("a", "a2")
        lanes.submit("b", "b1")
        assert len(lanes) == 2
        await lanes.started["a1"].wait()
        await lanes.started["b1"].wait()
        assert not lanes.started["a2"].is_set()  # a2 waits behind a1
        lanes.gates["b1"].set()  # b finishes while a1 still runs
        lanes.gates["a2"].set()
        lanes.gates["a1"].set()
    assert lanes.order == [("b", "b1"), ("a", "a1"), ("a", "a2")]


async def test_a_lane_is_gone_once_empty_and_a_new_item_opens_a_new_one() -> None:
    async with asyncio.TaskGroup() as tasks:
        lanes = Recorder(tasks)
        first = lanes.submit("a", "a1")
        lanes.gates["a1"].set()
        assert first.worker is not None
        await first.worker
        assert len(lanes) == 0
        assert lanes.closed == ["a"]
        assert first.worker is None
        second = lanes.submit("a", "a2")
        assert second is not first
        lanes.gates["a2"].set()
    assert lanes.closed == ["a", "a"]
    assert second.ran == ["a2"]


async def test_an_error_an_item_lets_out_ends_its_lane_and_is_not_swallowed() -> None:
    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="boom")):
        async with asyncio.TaskGroup() as tasks:
            lanes = Recorder(tasks)
            lanes.submit("a", "boom")
            lanes.submit("a", "after")
            lanes.gates["boom"].set()
    assert len(lanes) == 0
    assert lanes.closed == ["a"]
    assert lanes.order == []  # what waited behind went with the lane


async def test_the_take_strategy_decides_what_runs_next() -> None:
    def newest_first(pending: deque[str]) -> str:
        return pending.pop()

    async with asyncio.TaskGroup() as tasks:
        lanes = Recorder(tasks, take=newest_first)
        lanes.submit("a", "a1")
        lanes.submit("a", "a2")
        lanes.submit("a", "a3")
        for gate in lanes.gates.values():
            gate.set()
    assert [item for _, item in lanes.order] == ["a3", "a2", "a1"]
