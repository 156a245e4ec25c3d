"""Two ingress "processes" run the same Telegram bot (python-telegram-bot against the fake Bot
API) under one poller lease: only the holder polls; when it stops, the standby takes over and
receives the next message. The leases live in the real NATS server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.js.kv import KeyValue

from bus import InboundMessage, create_bus
from channels.access.allow import AllowList
from channels.lifecycle.run_state import LeasedChannels
from channels.outbound.manager import ChannelManager
from channels.telegram import TelegramChannel
from gateway.cluster.lease import PollerLease
from tests.channels.telegram.conftest import FAST_BACKOFF, config_for
from tests.fakes.telegram_server import FakeTelegram
from tests.support.nats_leases import LeaseBucket, bucket_view, lease_bucket

WAIT_S = 60.0
PROFILE = "support"


class Ingress:
    def __init__(self, name: str, kv: KeyValue, fake: FakeTelegram, data_dir: Path) -> None:
        config = config_for(fake)
        channel = TelegramChannel(config, data_dir=data_dir, backoff=FAST_BACKOFF)
        channel.allow = AllowList(config.allow)
        self.agent, publisher = create_bus(16)
        self.manager = ChannelManager(
            PROFILE,
            publisher,
            run_channel=LeasedChannels(
                PROFILE, lambda key: PollerLease(kv, key, name, ttl_s=600.0, renew_s=0.5)
            ),
        )
        self.manager.register(channel)

    async def next_inbound(self) -> InboundMessage:
        message = await self.agent.recv()
        assert message is not None, "the bus closed"
        return message


@pytest.fixture
async def bucket() -> AsyncIterator[LeaseBucket]:
    async with lease_bucket() as created:
        yield created


async def test_only_the_lease_holder_polls_telegram(bucket: LeaseBucket, tmp_path: Path) -> None:
    async with (
        FakeTelegram() as fake,
        bucket_view(bucket) as first_kv,
        bucket_view(bucket) as second_kv,
    ):
        first = Ingress("first", first_kv, fake, tmp_path / "first")
        async with asyncio.timeout(WAIT_S), asyncio.TaskGroup() as group:
            group.create_task(first.manager.run(), name="first")
            await fake.wait_until(lambda: fake.long_polls_waiting > 0, timeout_s=WAIT_S)
            second = Ingress("second", second_kv, fake, tmp_path / "second")
            group.create_task(second.manager.run(), name="second")

            fake.push_message(42, "hello")
            assert (await first.next_inbound()).content == "hello"
            # The standby never started the channel: one getMe, one poller.
            await fake.wait_until(lambda: fake.long_polls_waiting > 0, timeout_s=WAIT_S)
            assert len(fake.calls("getMe")) == 1
            assert fake.long_polls_waiting == 1

            await first.manager.stop()
            await fake.wait_for_calls("getMe", 2, timeout_s=WAIT_S)
            fake.push_message(42, "still there?")
            assert (await second.next_inbound()).content == "still there?"
            await second.manager.stop()
        assert first.agent.inbound_depth() == 0, "the first ingress got the second message too"
