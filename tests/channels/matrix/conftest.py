"""A running Matrix channel (the real matrix-nio) against the fake homeserver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from channels.access.allow import AllowList
from channels.matrix import MatrixChannel, MatrixTimeouts
from config import MatrixConfig
from tests.channels.conftest import fake_fixture
from tests.fakes.matrix_server import SERVER, FakeMatrix
from tests.support.inbound import RecordingInbound

WAIT_S = 10.0
ALICE = f"@alice:{SERVER}"
BOB = f"@bob:{SERVER}"
MALLORY = f"@mallory:{SERVER}"


def make_channel(fake: FakeMatrix, data_dir: Path, **options: Any) -> MatrixChannel:
    config = MatrixConfig.model_validate(
        {
            "homeserver": fake.homeserver,
            "user_id": fake.bot_user_id,
            "access_token": fake.access_token,
            **options,
        }
    )
    timeouts = MatrixTimeouts(sync_s=5.0, request_s=5.0)
    channel = MatrixChannel(config, data_dir=data_dir, timeouts=timeouts)
    channel.allow = AllowList([ALICE, BOB])
    return channel


@dataclass
class RunningMatrix:
    fake: FakeMatrix
    channel: MatrixChannel
    inbound: RecordingInbound
    task: asyncio.Task[None]
    data_dir: Path

    async def stop(self) -> None:
        await self.channel.stop()
        await asyncio.wait_for(self.task, WAIT_S)


async def run_channel(fake: FakeMatrix, data_dir: Path, **options: Any) -> RunningMatrix:
    """Started, past its first sync and waiting in a long poll."""
    channel = make_channel(fake, data_dir, **options)
    inbound = RecordingInbound()
    polls = fake.syncs
    task = asyncio.create_task(channel.start(inbound), name="matrix-under-test")
    async with asyncio.timeout(WAIT_S):
        await channel.wait_receiving()
    await fake.wait_until(lambda: fake.long_polls_waiting > 0 and fake.syncs > polls, WAIT_S)
    return RunningMatrix(fake, channel, inbound, task, data_dir)


fake = fake_fixture(FakeMatrix)


@pytest.fixture
async def matrix(fake: FakeMatrix, tmp_path: Path) -> AsyncIterator[RunningMatrix]:
    running = await run_channel(fake, tmp_path)
    try:
        yield running
    finally:
        await running.stop()
