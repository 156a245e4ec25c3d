"""A Feishu channel started against the fake Feishu, with an inbound sender the test controls."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from bus import OutboundMessage
from channels.access.allow import AllowList
from channels.feishu import FeishuChannel
from channels.lifecycle.reconnect import ReconnectPolicy
from config import FeishuConfig
from tests.channels.inbound_gate import GatedInbound
from tests.fakes.feishu_server import FakeFeishu

ALICE, MALLORY = "ou_alice0000000000000001", "ou_mallory00000000000001"
DM, GROUP = "oc_dm0000000000000000001", "oc_group0000000000000001"


def config_for(fake: FakeFeishu, **overrides: object) -> FeishuConfig:
    values: dict[str, object] = {
        "app_id": fake.app_id,
        "app_secret": fake.app_secret,
        "base_url": fake.base_url,
        "allow": [ALICE],
    }
    values.update(overrides)
    return FeishuConfig.model_validate(values)


@dataclass
class RunningFeishu:
    fake: FakeFeishu
    channel: FeishuChannel
    inbound: GatedInbound
    task: asyncio.Task[None]


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu(ping_interval_s=1) as server:
        yield server


@asynccontextmanager
async def run_feishu(
    fake: FakeFeishu, *, inbound_reactions: bool = False, **overrides: object
) -> AsyncIterator[RunningFeishu]:
    with tempfile.TemporaryDirectory(prefix="feishu-") as data_dir:
        channel = FeishuChannel(
            config_for(fake, **overrides),
            data_dir=Path(data_dir),
            reconnect=ReconnectPolicy(base_s=0.05),
            inbound_reactions=inbound_reactions,
        )
        channel.allow = AllowList([ALICE])
        inbound = GatedInbound()
        task = asyncio.create_task(channel.start(inbound), name="feishu-under-test")
        try:
            yield RunningFeishu(fake, channel, inbound, task)
        finally:
            await channel.stop()
            await asyncio.wait({task}, timeout=5)
            assert task.done()


async def sent_before_a_restart(fake: FakeFeishu, chat_id: str, text: str) -> str:
    """A card another run of the channel sent (one whose chat the channel under test does not
    know): its message id."""
    with tempfile.TemporaryDirectory(prefix="feishu-") as data_dir:
        earlier = FeishuChannel(config_for(fake), data_dir=Path(data_dir))
        try:
            sent = await earlier.send_with_id(
                OutboundMessage(channel="feishu", chat_id=chat_id, content=text)
            )
        finally:
            await earlier.stop()
    assert sent is not None
    return sent
