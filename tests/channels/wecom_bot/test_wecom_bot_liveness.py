"""The WeCom AI bot connection stays alive: pings, a dead connection replaced, a full backlog."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bus import InboundMessage, InboundRefused
from channels.errors import FatalChannelError
from channels.lifecycle.reconnect import ReconnectPolicy
from channels.wecom_bot import WecomBotChannel, WecomBotTimeouts
from tests.channels.wecom_bot.configs import wecom_bot_config
from tests.fakes.wecom_bot_server import FakeWecomBot

WAIT_S = 10.0


class RefusingOnce:
    """An inbound sender whose backlog is full the first time."""

    def __init__(self) -> None:
        self.calls = 0
        self.stored: list[InboundMessage] = []
        self.changed = asyncio.Event()

    async def send(self, message: InboundMessage) -> None:
        self.calls += 1
        if self.calls == 1:
            raise InboundRefused("global", 0.05, "the profile's backlog is full")
        self.stored.append(message)
        self.changed.set()

    def close(self) -> None:
        """Nothing to release."""


async def test_pings_keep_the_connection_and_unanswered_ones_replace_it(tmp_path: Path) -> None:
    async with FakeWecomBot() as fake:
        channel = WecomBotChannel(
            wecom_bot_config(fake),
            data_dir=tmp_path,
            timeouts=WecomBotTimeouts(
                ack_s=0.2, ping_interval_s=0.05, reconnect=ReconnectPolicy(base_s=0.05)
            ),
        )
        inbound = RefusingOnce()
        task = asyncio.create_task(channel.start(inbound), name="test:wecom-bot")
        try:
            await fake.wait_until(lambda: fake.pings >= 3, WAIT_S)
            assert len(fake.subscribes) == 1
            fake.answer_pings = False
            # Two pings without an answer: the connection is given up and a new one made.
            await fake.wait_subscribed(count=2, timeout_s=WAIT_S)
            fake.answer_pings = True
            await asyncio.wait_for(channel.wait_receiving(), WAIT_S)
            # A full backlog is waited out; the message is stored once.
            await fake.push_text("alice", "let me through")
            await asyncio.wait_for(inbound.changed.wait(), WAIT_S)
            assert [m.content for m in inbound.stored] == ["let me through"]
            assert inbound.calls == 2
        finally:
            await channel.stop()
            await asyncio.wait_for(task, WAIT_S)


async def test_another_connection_taking_the_bot_over_is_fatal(tmp_path: Path) -> None:
    async with FakeWecomBot() as fake:
        channel = WecomBotChannel(wecom_bot_config(fake), data_dir=tmp_path)
        task = asyncio.create_task(channel.start(RefusingOnce()), name="test:wecom-bot")
        await asyncio.wait_for(channel.wait_receiving(), WAIT_S)
        await fake.push_event("enter_chat")  # ignored
        await fake.push_event("disconnected_event")
        with pytest.raises(FatalChannelError, match="another one subscribed"):
            await asyncio.wait_for(task, WAIT_S)
