"""The turn runner alone: what a turn shows while it runs, streamed or not."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from bus import (
    ANSWERS,
    SESSION,
    InboundMessage,
    OutboundEvent,
    SessionKey,
    StreamSnapshot,
    create_bus,
)
from config import ProfileConfig
from gateway.agents import Agent, AgentReply, AgentTurn, SnapshotSink
from gateway.metrics import GatewayMetrics
from gateway.services import ProfileServices
from gateway.turns import TurnRunner
from sessions import ActiveTopics, SessionManager, SessionStore


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
    handle, _publisher = create_bus()
    async with SessionStore(tmp_path, fsync="never") as store:
        config = ProfileConfig.model_validate({"sessions": {"max_history": 50}})
        services = ProfileServices(
            "p",
            config,
            SessionManager(store),
            ActiveTopics(tmp_path),
            handle,
            GatewayMetrics.create(CollectorRegistry()),
        )
        trigger = InboundMessage(
            channel="rec", sender_id="alice", chat_id="c1", content="hi", message_id="m1"
        )
        key = SessionKey.for_chat("p", "rec", "c1")
        outbound = Recorded()
        result = await TurnRunner(services, TwoSnapshotAgent()).run(
            key,
            trigger,
            "hi",
            ["m1"],
            stream_id="t1",
            streams=streams,
            shows_typing=False,
            outbound=outbound,
        )
    assert result.reply == "half done"
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
