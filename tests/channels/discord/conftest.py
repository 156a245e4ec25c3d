"""A running Discord channel (the real discord.py) against the fake Discord, on a real bus."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from channels.discord import DiscordChannel, DiscordTimeouts
from config import DiscordConfig
from tests.channels.conftest import fake_fixture
from tests.channels.started import OnBus, started_on_bus
from tests.fakes.discord_server import FakeDiscord, FakeUser

WAIT_S = 10.0

ALICE = FakeUser(id=111_111_111_111_111_111, username="alice", global_name="Alice")
OTHER_BOT = FakeUser(id=222_222_222_222_222_222, username="helper-bot", bot=True)
DM_CHANNEL = 300_000_000_000_000_001
GUILD = 400_000_000_000_000_001
GUILD_CHANNEL = 400_000_000_000_000_002


def make_channel(
    fake: FakeDiscord, data_dir: Path, *, token: str | None = None, require_mention: bool = True
) -> DiscordChannel:
    # READY waits this long for more GUILD_CREATEs; the fake sends them all at once.
    config = DiscordConfig.model_validate(
        {
            "token": token or fake.token,
            "api_base_url": fake.api_base_url,
            "gateway_url": fake.gateway_url,
            "require_mention": require_mention,
        }
    )
    return DiscordChannel(config, data_dir=data_dir, timeouts=DiscordTimeouts(guild_ready_s=0.05))


@dataclass
class RunningBot(OnBus[FakeDiscord, DiscordChannel]):
    task: asyncio.Task[None]
    data_dir: Path


@asynccontextmanager
async def run_bot(
    fake: FakeDiscord, data_dir: Path, *, require_mention: bool = True
) -> AsyncIterator[RunningBot]:
    """The channel started on a fresh bus, connected; stopped and awaited afterwards."""
    channel = make_channel(fake, data_dir, require_mention=require_mention)

    async def ready(_task: asyncio.Task[None]) -> None:
        await fake.wait_ready()
        await channel.wait_receiving()

    async with started_on_bus(channel, ready, name="discord-test") as (agent, task):
        yield RunningBot(fake, channel, agent, task, data_dir)


fake_discord = fake_fixture(FakeDiscord)


@pytest.fixture
async def bot(fake_discord: FakeDiscord, tmp_path: Path) -> AsyncIterator[RunningBot]:
    async with run_bot(fake_discord, tmp_path) as running:
        yield running
