"""A running LINE channel (the real line-bot-sdk) against the fake LINE Platform, its webhook
route served on 127.0.0.1 as the daemon's HTTP server would serve it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from channels.access.allow import AllowList
from channels.line import LineChannel
from config import LineConfig
from tests.channels.conftest import fake_fixture
from tests.channels.started import once, serving_webhooks, started
from tests.fakes.line_server import FakeLine
from tests.support.inbound import RecordingInbound

WAIT_S = 10.0
ALICE = "U1111111111111111111111111111a11"
MALLORY = "U6666666666666666666666666666m66"
GROUP = "C0000000000000000000000000000g01"
PATH = "/line/webhook"


@dataclass
class RunningLine:
    fake: FakeLine
    channel: LineChannel
    inbound: RecordingInbound
    url: str
    task: asyncio.Task[None]


def make_channel(fake: FakeLine, data_dir: Path, *, token: str | None = None) -> LineChannel:
    config = LineConfig.model_validate(
        {
            "channel_secret": fake.channel_secret,
            "channel_access_token": token or fake.access_token,
            "webhook_path": PATH,
            "api_base_url": fake.api_base_url,
            "data_api_base_url": fake.data_api_base_url,
        }
    )
    channel = LineChannel(config, data_dir=data_dir, request_timeout_s=5.0)
    channel.allow = AllowList([ALICE])
    return channel


fake = fake_fixture(FakeLine)


@pytest.fixture
async def line(fake: FakeLine, tmp_path: Path) -> AsyncIterator[RunningLine]:
    channel = make_channel(fake, tmp_path)
    inbound = RecordingInbound()
    async with (
        serving_webhooks(channel) as server,
        started(channel, inbound, once(channel.wait_receiving), name="line-under-test") as task,
    ):
        yield RunningLine(fake, channel, inbound, server.origin + PATH, task)
