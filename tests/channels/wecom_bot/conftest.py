"""The WeCom AI bot channel running against its fake, on a bus of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from channels.access.allow import AllowList
from channels.lifecycle.reconnect import ReconnectPolicy
from channels.wecom_bot import WecomBotChannel, WecomBotTimeouts
from tests.channels.started import OnBus, once, started_on_bus
from tests.channels.wecom_bot.configs import wecom_bot_config
from tests.fakes.wecom_bot_server import FakeWecomBot

Running = OnBus[FakeWecomBot, WecomBotChannel]


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    async with FakeWecomBot() as fake:
        channel = WecomBotChannel(
            wecom_bot_config(fake),
            data_dir=tmp_path,
            timeouts=WecomBotTimeouts(reconnect=ReconnectPolicy(base_s=0.05)),
        )
        channel.allow = AllowList(["alice"])
        ready = once(channel.wait_receiving)
        async with started_on_bus(channel, ready, name="test:wecom-bot", capacity=16) as (
            agent,
            _task,
        ):
            yield Running(fake, channel, agent)
