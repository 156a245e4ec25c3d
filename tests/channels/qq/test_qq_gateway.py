"""QQ's websocket gateway (`mode: websocket`) against the fake QQ."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from channels.qq import QQBotChannel
from channels.reconnect import ReconnectPolicy
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
