"""WeCom AI bot end to end: the daemon subprocess against the fake WeCom websocket server."""

from __future__ import annotations

import itertools
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e.conftest import WAIT_S, running_daemon
from tests.e2e.echo_bot import echo_profile
from tests.e2e.long_text import assert_split_well, mixed_text
from tests.fakes.wecom_bot_server import FakeWecomBot
from tests.support.daemon import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ALICE, MALLORY = "alice", "mallory"
STREAM_LIMIT_BYTES, MARKDOWN_LIMIT_BYTES = 20_480, 4_096


def profile(fake: FakeWecomBot, *, delay_s: float = 0.3, pieces: int = 8) -> str:
    channel = f"""\
  - type: wecom-bot
    bot_id: "{fake.bot_id}"
    secret: "{fake.secret}"
    ws_url: {fake.ws_url}
    allow: [{ALICE}]
"""
    return echo_profile(channel, delay_s=delay_s, pieces=pieces)


@dataclass
class WecomBot:
    fake: FakeWecomBot
    daemon: DaemonProcess
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_group(self) -> str:
        return f"wrGROUP{next(self.numbers):04d}"

    async def say(self, chat: str, text: str, *, user: str = ALICE) -> str:
        req_id, _ = await self.fake.push_text(user, text, chat_id=chat)
        return req_id

    async def answered(self, req_id: str) -> str:
        await self.fake.wait_until(lambda: self.fake.finished_text(req_id) is not None, WAIT_S)
        return str(self.fake.finished_text(req_id))

    async def barrier(self, chat: str) -> None:
        """Another message in the chat, answered: everything before it was delivered."""
        marker = f"barrier {next(self.numbers)}"
        assert await self.answered(await self.say(chat, marker)) == marker


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WecomBot]:
    async with (
        FakeWecomBot() as fake,
        running_daemon(tmp_path_factory.mktemp("wecom-bot"), {"main": profile(fake)}) as daemon,
    ):
        await fake.wait_subscribed(timeout_s=WAIT_S)
        yield WecomBot(fake, daemon)


async def test_an_allowed_user_gets_the_echo_and_a_stranger_one_notice(bot: WecomBot) -> None:
    fake = bot.fake
    first = await bot.say(MALLORY, "let me in", user=MALLORY)
    second = await bot.say(MALLORY, "please?", user=MALLORY)
    assert await bot.answered(await bot.say(ALICE, "hello from alice")) == "hello from alice"
    notice = await bot.answered(first)
    assert MALLORY in notice
    await bot.barrier(MALLORY + "-never")  # a group the stranger is not in: all dispatched
    assert fake.frames(second) == []
    assert fake.markdown_to(MALLORY) == []
    refused = await bot.daemon.metric(
        "octos_messages_in_total", channel="wecom-bot", outcome="refused"
    )
    assert refused == 2
    assert fake.violations == []


async def test_stream_frames_arrive_in_order_each_after_its_ack_and_finish_once(
    bot: WecomBot,
) -> None:
    fake, group = bot.fake, bot.new_group()
    fake.ack_delay_s = 0.05
    text = " ".join(f"Streaming shows the reply growing, word {n}." for n in range(1, 40))
    try:
        req_id = await bot.say(group, text)
        assert await bot.answered(req_id) == text
    finally:
        fake.ack_delay_s = 0.0
    frames = fake.frames(req_id)
    assert len(frames) > 2, "a slow reply is shown growing"
    assert [f.finish for f in frames] == [False] * (len(frames) - 1) + [True]
    assert len({f.stream_id for f in frames}) == 1
    contents = [f.content for f in frames]
    assert all(text.startswith(c) for c in contents)
    assert [len(c) for c in contents] == sorted(len(c) for c in contents)
    assert fake.violations == []


async def test_long_mixed_replies_arrive_complete_within_the_limits(bot: WecomBot) -> None:
    fake = bot.fake
    ten_thousand, group = mixed_text(), bot.new_group()
    # 10,000 characters of prose, CJK, emoji and code: 14,500 bytes, one streamed message.
    assert await bot.answered(await bot.say(group, ten_thousand)) == ten_thousand
    twenty_thousand, group = mixed_text(20_000), bot.new_group()
    req_id = await bot.say(group, twenty_thousand)
    await bot.barrier(group)
    # Past 20,480 bytes the stream rolls over; the rest goes out as Markdown messages.
    pieces = [str(fake.finished_text(req_id)), *fake.markdown_to(group)]
    assert_split_well(twenty_thousand, pieces, fences_shown=True)
    assert len(pieces[0].encode()) <= STREAM_LIMIT_BYTES
    assert all(len(piece.encode()) <= MARKDOWN_LIMIT_BYTES for piece in pieces[1:])
    assert fake.violations == []


async def test_a_rate_limit_is_waited_out_and_the_reply_delivered_once(bot: WecomBot) -> None:
    fake, group = bot.fake, bot.new_group()
    before = await bot.daemon.metric("octos_send_retries_total", channel="wecom-bot")
    errors = len(fake.reply_errors)
    fake.rate_limit_next()
    req_id = await bot.say(group, "patience, please")
    assert await bot.answered(req_id) == "patience, please"
    await bot.barrier(group)
    assert fake.reply_errors[errors:] == [45009]
    assert [f.finish for f in fake.frames(req_id)].count(True) == 1
    assert fake.markdown_to(group) == []
    retries = await bot.daemon.metric(
        "octos_send_retries_total", channel="wecom-bot", reason="rate_limited"
    )
    assert retries > before


async def test_a_dropped_connection_is_reconnected(bot: WecomBot) -> None:
    fake = bot.fake
    subscribed = len(fake.subscribes)
    await fake.drop_connections()
    await fake.wait_subscribed(count=subscribed + 1, timeout_s=WAIT_S)
    group = bot.new_group()
    assert await bot.answered(await bot.say(group, "still there?")) == "still there?"


async def test_a_message_received_before_a_sigkill_is_answered_once_after_restart(
    tmp_path: Path,
) -> None:
    async with FakeWecomBot() as fake:
        # Two pieces 30 s apart: the kill lands between them, mid-turn.
        profiles = {"main": profile(fake, delay_s=30, pieces=2)}
        async with running_daemon(tmp_path, profiles) as daemon:
            await fake.wait_subscribed(timeout_s=WAIT_S)
            await fake.push_text(ALICE, "survive this")
            # The protocol has no acknowledgement: the kill comes once the message is durable
            # (a turn may start before its record is written).
            await daemon.wait_log(lambda e: e.get("event") == "intake.accepted")
            await daemon.wait_log(lambda e: e.get("event") == "turn.started")
            daemon.signal(signal.SIGKILL)
            await daemon.wait(WAIT_S)
        fast = {"main": profile(fake, delay_s=0.05, pieces=1)}
        async with running_daemon(tmp_path, fast) as daemon:
            await fake.wait_subscribed(count=2, timeout_s=WAIT_S)
            # The old req_id died with the connection: the answer is sent as a new message.
            await fake.wait_until(lambda: fake.markdown_to(ALICE), WAIT_S)
            assert await daemon.stop_cleanly() == 0
        assert fake.markdown_to(ALICE) == ["survive this"]
