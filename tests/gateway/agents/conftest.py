"""Shared pieces of the agent tests: a turn to answer and a sink that records snapshots."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from bus import Message, SessionKey
from gateway.agents import Agent, AgentTurn
from tests.fakes import StreamControl
from tests.fakes.changes import Changes


class SnapshotRecorder:
    """A snapshot sink that keeps every snapshot and lets a test wait for the first one."""

    def __init__(self) -> None:
        self.snapshots: list[str] = []
        self.first = asyncio.Event()
        self._changes = Changes()

    async def __call__(self, text: str) -> None:
        self.snapshots.append(text)
        self.first.set()
        await self._changes.notify()

    async def wait_for_count(self, count: int, timeout_s: float = 10.0) -> None:
        """Wait until at least `count` snapshots arrived."""
        await self._changes.wait_until(lambda: len(self.snapshots) >= count, timeout_s)

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


async def cancel_mid_stream(
    agent: Agent, recorder: SnapshotRecorder, control: StreamControl, *, shown: int, name: str
) -> None:
    """Run a turn until the fake holds its stream with `shown` snapshots out, cancel the turn,
    and wait until the fake sees its client go away."""
    run = asyncio.create_task(agent.run(make_turn(), recorder), name=name)
    await asyncio.wait_for(control.holding.wait(), timeout=10)
    await recorder.wait_for_count(shown)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await asyncio.wait_for(control.client_disconnected.wait(), timeout=10)


@pytest.fixture
def recorder() -> SnapshotRecorder:
    return SnapshotRecorder()
