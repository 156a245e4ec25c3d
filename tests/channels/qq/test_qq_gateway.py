"""QQ's websocket gateway (`mode: websocket`) against the fake QQ."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from channels.lifecycle.reconnect import ReconnectPolicy
from channels.qq import QQBotChannel
from channels.qq.channel import session_path
from tests.channels.qq.configs import qq_config
from tests.channels.started import OnBus, once, started_on_bus
from tests.fakes.qq_server import FakeQQ

WAIT_S = 10.0


Running = OnBus[FakeQQ, QQBotChannel]


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    async with FakeQQ() as fake:
        fake.heartbeat_interval_ms = 50
        channel = QQBotChannel(
            qq_config(fake, mode="websocket"), reconnect=ReconnectPolicy(base_s=0.05)
        )
        ready = once(channel.wait_receiving)
        async with started_on_bus(channel, ready, name="test:qq-gateway", capacity=16) as (
            agent,
            _task,
        ):
            yield Running(fake, channel, agent)


async def test_identifies_takes_events_and_reports_the_handled_sequence(running: Running) -> None:
    fake = running.fake
    assert running.channel.web_routes() == ()
    [identify] = fake.identifies
    assert identify["token"].startswith("QQBot token-")
    assert identify["intents"] & (1 << 25)
    frame = await fake.push_gateway(fake.c2c_message("alice-openid", "hello gateway"))
    message = await running.next_inbound()
    assert (message.chat_id, message.content) == ("c2c:alice-openid", "hello gateway")
    await fake.wait_until(lambda: frame["s"] in fake.heartbeats, WAIT_S)
    assert fake.violations == []


async def test_a_dropped_gateway_resumes_and_missed_events_arrive_once(running: Running) -> None:
    fake = running.fake
    await fake.push_gateway(fake.group_message("G1", "bob", "before"))
    assert (await running.next_inbound()).content == "before"
    await fake.drop_gateway()
    await fake.wait_until(lambda: fake.gateway_connections == 0, WAIT_S)
    await fake.push_gateway(fake.c2c_message("alice-openid", "while away"))
    await fake.wait_until(lambda: fake.resumes, WAIT_S)
    assert (await running.next_inbound()).content == "while away"
    [resume] = fake.resumes
    assert resume["seq"] == 2
    await fake.push_gateway(fake.c2c_message("alice-openid", "after"))
    assert (await running.next_inbound()).content == "after"


async def test_unanswered_heartbeats_replace_the_connection(running: Running) -> None:
    fake = running.fake
    fake.answer_heartbeats = False
    await fake.wait_until(lambda: fake.resumes, WAIT_S)
    fake.answer_heartbeats = True
    await fake.push_gateway(fake.c2c_message("alice-openid", "back again"))
    assert (await running.next_inbound()).content == "back again"


async def received_until_stopped(fake: FakeQQ, data_dir: Path, count: int) -> list[str]:
    """A channel keeping its session in `data_dir` runs until it took `count` messages."""
    channel = QQBotChannel(
        qq_config(fake, mode="websocket"), data_dir=data_dir, reconnect=ReconnectPolicy(0.05)
    )
    async with started_on_bus(
        channel, once(channel.wait_receiving), name="test:qq-gateway", capacity=16
    ) as (agent, _task):
        contents = []
        for _ in range(count):
            message = await asyncio.wait_for(agent.recv(), WAIT_S)
            assert message is not None
            contents.append(message.content)
        # Stopped only once the last event's sequence is on disk, as a running bot's would be.
        await fake.wait_until(lambda: session_seq(data_dir) == fake.last_seq, WAIT_S)
    return contents


def session_seq(data_dir: Path) -> int | None:
    path = next((data_dir / "qq").glob("*.session.json"), None)
    return None if path is None else json.loads(path.read_text())["seq"]


async def test_a_restart_resumes_the_session_and_what_qq_sent_meanwhile_arrives_once(
    tmp_path: Path,
) -> None:
    async with FakeQQ() as fake:
        fake.heartbeat_interval_ms = 50
        first = asyncio.create_task(received_until_stopped(fake, tmp_path, 1))
        await fake.wait_until(lambda: fake.gateway_connections == 1, WAIT_S)
        await fake.push_gateway(fake.c2c_message("alice-openid", "before the restart"))
        assert await first == ["before the restart"]
        await fake.wait_until(lambda: fake.gateway_connections == 0, WAIT_S)
        await fake.push_gateway(fake.c2c_message("alice-openid", "while the bot was down"))

        second = asyncio.create_task(received_until_stopped(fake, tmp_path, 2))
        await fake.wait_until(lambda: fake.resumes, WAIT_S)
        await fake.push_gateway(fake.c2c_message("alice-openid", "after it"))
        assert await second == ["while the bot was down", "after it"]
        assert len(fake.identifies) == 1, "identified afresh instead of resuming"


async def test_a_session_qq_no_longer_holds_is_logged_as_a_gap_and_identified_anew(
    tmp_path: Path,
) -> None:
    async with FakeQQ() as fake:
        path = session_path(tmp_path, fake.app_id)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"session_id": "expired-session", "seq": 41}))
        fake.heartbeat_interval_ms = 50
        channel = QQBotChannel(
            qq_config(fake, mode="websocket"),
            data_dir=tmp_path,
            reconnect=ReconnectPolicy(0.05),
        )
        with capture_logs() as logged:
            async with started_on_bus(
                channel, once(channel.wait_receiving), name="test:qq-gateway", capacity=16
            ) as (agent, _task):
                await fake.push_gateway(fake.c2c_message("alice-openid", "fresh"))
                message = await asyncio.wait_for(agent.recv(), WAIT_S)
                assert message is not None
                assert message.content == "fresh"
        [gap] = [e for e in logged if e["event"] == "qq.gap_unfilled"]
        assert gap["after_seq"] == 41
        assert len(fake.identifies) == 1
