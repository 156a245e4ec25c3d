"""Shared pieces of the agent tests: a turn to answer and a sink that records snapshots."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from bus import Message, SessionKey
from gateway.agents import AgentTurn


class SnapshotRecorder:
    """A snapshot sink that keeps every snapshot and lets a test wait for the first one."""

    def __init__(self) -> None:
        self.snapshots: list[str] = []
        self.first = asyncio.Event()
        self._changed = asyncio.Condition()

    async def __call__(self, text: str) -> None:
        self.snapshots.append(text)
        self.first.set()
        async with self._changed:
            self._changed.notify_all()

    async def wait_for_count(self, count: int, timeout_s: float = 10.0) -> None:
        """Wait until at least `count` snapshots arrived."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: len(self.snapshots) >= count)

    def assert_grows_to(self, final: str) -> None:
        """Each snapshot extends the one before it, and the last is the whole reply."""
        assert self.snapshots, "no snapshot was emitted"
        assert self.snapshots[-1] == final
        for before, after in zip(self.snapshots, self.snapshots[1:], strict=False):
            assert after.startswith(before)
            assert len(after) > len(before)


def make_turn(text: str = "hello there", history: Sequence[Message] = ()) -> AgentTurn:
    return AgentTurn(
        profile="work",
        session_key=SessionKey.parse("work:telegram:42"),
        history=list(history),
        message=Message.user(text),
    )


@pytest.fixture
def recorder() -> SnapshotRecorder:
    return SnapshotRecorder()
