"""Fixtures: the fake Bot API server, and Telegram channels configured against it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bus import AgentHandle
from channels.access.allow import AllowList
from channels.telegram import Backoff, TelegramChannel
from config import TelegramConfig
from tests.channels.conftest import fake_fixture
from tests.channels.started import ReadsInbound, started_on_bus
from tests.fakes.telegram_server import FakeTelegram

WAIT_S = 10.0
FAST_BACKOFF = Backoff(initial_s=0.05, max_s=0.2)

ChannelFactory = Callable[..., TelegramChannel]


fake = fake_fixture(FakeTelegram)


def config_for(fake: FakeTelegram, **overrides: Any) -> TelegramConfig:
    settings: dict[str, Any] = {
        "token": fake.token,
        "base_url": fake.base_url,
        "base_file_url": fake.base_file_url,
        "allow": ["*"],
        "poll_timeout_s": 5,
    }
    settings.update(overrides)
    return TelegramConfig(**settings)


@pytest.fixture
def make_channel(fake: FakeTelegram, tmp_path: Path) -> ChannelFactory:
    def make(backoff: Backoff = FAST_BACKOFF, **overrides: Any) -> TelegramChannel:
        config = config_for(fake, **overrides)
        channel = TelegramChannel(config, data_dir=tmp_path, backoff=backoff)
        channel.allow = AllowList(config.allow)
        return channel

    return make


@dataclass
class Running(ReadsInbound):
    """A started channel, the agent's end of its bus, and its `start()` task."""

    channel: TelegramChannel
    agent: AgentHandle
    task: asyncio.Task[None]


@asynccontextmanager
async def running(channel: TelegramChannel, fake: FakeTelegram) -> AsyncIterator[Running]:
    """Start `channel`, wait until it long-polls, stop it on the way out."""

    async def ready(task: asyncio.Task[None]) -> None:
        if channel.web_routes():
            await fake.wait_for_calls("setWebhook", timeout_s=WAIT_S)
        else:
            await fake.wait_until(lambda: fake.long_polls_waiting > 0 or task.done())
        if task.done():
            task.result()

    async with started_on_bus(channel, ready, name="test:telegram-start") as (agent, task):
        yield Running(channel, agent, task)
