"""The turn runner alone: what a turn shows while it runs, streamed or not."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus import ANSWERS, SESSION, InboundMessage, OutboundEvent, SessionKey, StreamSnapshot
from gateway.agents import Agent, AgentReply, AgentTurn, SnapshotSink
from gateway.turn.runner import TurnRunner
from tests.gateway.profile import profile_services


class TwoSnapshotAgent(Agent):
    kind = "two-snapshots"

    async def run(self, turn: AgentTurn, on_snapshot: SnapshotSink) -> AgentReply:
        await on_snapshot("half")
        await on_snapshot("half done")
        return AgentReply("half done")


class Recorded:
    def __init__(self) -> None:
        self.events: list[OutboundEvent] = []

    async def send(self, event: OutboundEvent) -> None:
        self.events.append(event)


@pytest.mark.parametrize("streams", [True, False])
async def test_snapshots_reach_only_a_channel_that_shows_them(
    tmp_path: Path, streams: bool
) -> None:
    async with profile_services(tmp_path) as services:
        trigger = InboundMessage(
            channel="rec", sender_id="alice", chat_id="c1", content="hi", message_id="m1"
        )
        key = SessionKey.for_chat("p", "rec", "c1")
        outbound = Recorded()
        result = await TurnRunner(services, {"default": TwoSnapshotAgent()}).run(
            key,
            [trigger],
            ["m1"],
            stream_id="t1",
            streams=streams,
            shows_typing=False,
            outbound=outbound,
        )
    assert result.text == "half done"
    if not streams:
        assert outbound.events == []
        return
    snapshots = [e for e in outbound.events if isinstance(e, StreamSnapshot)]
    assert [s.reply.content for s in snapshots] == ["half", "half done"]
    for snapshot in snapshots:
        reply = snapshot.reply
        assert (reply.chat_id, reply.reply_to, reply.stream_id, reply.delivery_id) == (
            "c1",
            "m1",
            "t1",
            "t1",
        )
        assert reply.metadata == {ANSWERS: ["m1"], SESSION: "p:rec:c1"}
