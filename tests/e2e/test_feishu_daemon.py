"""Feishu/Lark end to end: the daemon subprocess, its aiohttp long connection and webhook route,
and the fake Feishu.

The shared daemon runs two profiles against one fake: `main` over the long connection and
`hooks` in webhook mode (Encrypt Key of Feishu's documentation example), whose events the
daemon's own HTTP server receives.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from channels.feishu.channel import CARD_TEXT_LIMIT
from tests.e2e.conftest import DAEMON_ENV, WAIT_S, gaps_s, no_repeats, running_daemon, session_keys
from tests.e2e.echo_bot import (
    EchoBot,
    assert_a_stream_cut_by_sigkill_is_finished_in_place,
    echo_profile,
)
from tests.e2e.long_text import assert_split_well, mixed_text, non_space, without_fences
from tests.fakes.feishu_server import MAX_BODY_BYTES, FakeFeishu
from tests.support.daemon import DaemonProcess, write_config

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ALICE, MALLORY = "ou_alice0000000000000001", "ou_mallory00000000000001"
WEBHOOK_PATH = "/feishu/events"
#: The channel's edit interval (Feishu allows 5 card updates a second) and clock tolerance.
EDIT_INTERVAL_S, TOLERANCE_S = 0.25, 0.05


def ws_profile(fake: FakeFeishu, *, delay_s: float = 0.3, pieces: int = 8) -> str:
    channel = f"""\
  - type: feishu
    app_id: {fake.app_id}
    app_secret: {fake.app_secret}
    base_url: {fake.base_url}
    allow: [{ALICE}]
"""
    return echo_profile(channel, delay_s=delay_s, pieces=pieces)


def webhook_profile(fake: FakeFeishu) -> str:
    return f"""\
agent: {{type: echo}}
channels:
  - type: feishu
    mode: webhook
    app_id: {fake.app_id}
    app_secret: {fake.app_secret}
    encrypt_key: "{fake.encrypt_key}"
    verification_token: {fake.verification_token}
    base_url: {fake.base_url}
    webhook_path: {WEBHOOK_PATH}
    allow: [{ALICE}]
"""


@dataclass
class FeishuBot(EchoBot[str]):
    fake: FakeFeishu
    daemon: DaemonProcess
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_chat(self) -> str:
        return f"oc_test{next(self.numbers):017d}"

    async def say(self, chat: str, text: str, *, user: str = ALICE) -> str:
        frame_id = await self.fake.push_event(self.fake.message_event(user, chat, text))
        await self.fake.wait_until(lambda: self.fake.acked(frame_id), WAIT_S)
        return frame_id

    def shown(self, chat: str) -> list[str]:
        return self.fake.texts(chat)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        await self.fake.wait_until(condition, WAIT_S)


async def connected(fake: FakeFeishu) -> None:
    await fake.wait_connected(timeout_s=WAIT_S)
    await fake.wait_until(lambda: fake.statuses("/open-apis/bot/v3/info").count(200) >= 2, WAIT_S)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[FeishuBot]:
    directory = tmp_path_factory.mktemp("feishu")
    async with (
        FakeFeishu() as fake,
        running_daemon(directory, {"main": ws_profile(fake), "hooks": webhook_profile(fake)}) as d,
    ):
        await connected(fake)
        yield FeishuBot(fake, d)


async def test_an_allowed_user_gets_the_echo_a_stranger_one_notice_and_sigterm_exits_0(
    tmp_path: Path,
) -> None:
    stranger_chat, chat = "oc_mallory000000000000001", "oc_alice00000000000000001"
    async with (
        FakeFeishu() as fake,
        running_daemon(tmp_path, {"main": ws_profile(fake, delay_s=0.05, pieces=2)}) as d,
    ):
        await fake.wait_connected(timeout_s=WAIT_S)
        bot = FeishuBot(fake, d)
        await bot.say(stranger_chat, "let me in", user=MALLORY)
        await bot.say(stranger_chat, "please?", user=MALLORY)
        await bot.say(chat, "你好，飞书")
        await bot.reply_shown(chat, "你好，飞书")
        refused = await d.metric(
            "octos_messages_in_total", profile="main", channel="feishu", outcome="refused"
        )
        assert refused == 2
        assert await d.stop_cleanly() == 0

    assert fake.texts(chat) == ["你好，飞书"]
    [notice] = fake.texts(stranger_chat)
    assert MALLORY in notice
    keys = session_keys(tmp_path / "data")
    assert f"main:feishu:{chat}" in keys
    assert not [key for key in keys if stranger_chat in key], keys
    assert fake.open_connections == 0


async def test_a_10000_character_reply_arrives_complete(bot: FeishuBot) -> None:
    chat, text = bot.new_chat(), mixed_text()
    cards = await bot.reply_shown_in(chat, text)
    assert all(len(card.encode()) <= CARD_TEXT_LIMIT.max_units for card in cards)
    assert non_space(without_fences("".join(cards))) == non_space(without_fences(text))
    refused = [c for c in bot.fake.calls if c.status != 200 and c.path.startswith("/open-apis/im")]
    assert not refused, refused


async def test_a_longer_reply_rolls_over_to_new_cards_at_natural_breaks(bot: FeishuBot) -> None:
    chat, text = bot.new_chat(), mixed_text(25_000)
    assert len(text.encode()) > MAX_BODY_BYTES
    cards = await bot.reply_shown_in(chat, text)
    assert all(len(card.encode()) <= CARD_TEXT_LIMIT.max_units for card in cards)
    assert_split_well(text, cards, fences_shown=True)
    refused = [c for c in bot.fake.calls if c.status != 200 and c.path.startswith("/open-apis/im")]
    assert not refused, refused


async def test_a_streamed_reply_updates_one_card_within_feishus_rate(bot: FeishuBot) -> None:
    chat = bot.new_chat()
    text = await bot.streamed_reply_delivered(chat)

    card, _barrier = bot.fake.chat_messages(chat)
    assert card.text == text
    assert card.updates, "a slow reply is shown growing"
    assert min(gaps_s(card.updates)) >= EDIT_INTERVAL_S - TOLERANCE_S
    patches = [c for c in bot.fake.calls if c.path.endswith(card.message_id)]
    assert [c.status for c in patches] == [200] * len(patches)
    assert no_repeats(card.shown)
    assert card.shown[-1] == text


async def test_a_429_is_waited_out_and_the_reply_delivered_once(bot: FeishuBot) -> None:
    chat = bot.new_chat()
    sent_before = bot.fake.statuses("/open-apis/im/v1/messages")
    bot.fake.rate_limit_next("send")
    await bot.say(chat, "patience, please")
    await bot.barrier(chat)

    assert bot.fake.texts(chat) == ["patience, please", bot.fake.texts(chat)[-1]]
    new = bot.fake.statuses("/open-apis/im/v1/messages")[len(sent_before) :]
    assert new.count(429) == 1
    retries = await bot.daemon.rate_limited_retries("feishu")
    assert retries >= 1


async def test_a_redelivered_event_and_a_reconnect_are_answered_once(bot: FeishuBot) -> None:
    fake, chat = bot.fake, bot.new_chat()
    opened = fake.connections_opened
    await fake.drop_connections()
    await fake.wait_connected(count=opened + 1, timeout_s=WAIT_S)
    event = fake.message_event(ALICE, chat, "are you still there")
    first = await fake.push_event(event)
    await bot.reply_shown(chat, "are you still there")
    again = await fake.push_event(event)  # Feishu delivers the same event again
    await fake.wait_until(lambda: fake.acked(first) and fake.acked(again), WAIT_S)
    await bot.barrier(chat)
    assert fake.texts(chat)[:-1] == ["are you still there"]


async def test_webhook_mode_refuses_forged_stale_and_unsigned_events_and_answers_a_signed_one(
    bot: FeishuBot,
) -> None:
    fake, url, chat = bot.fake, bot.daemon.http_url + WEBHOOK_PATH, bot.new_chat()
    challenge = fake.sealed(fake.url_verification(), signed=False)
    assert await fake.post(url, *challenge) == (200, '{"challenge": "ajls384kdjx98XX"}')
    wrong_token = fake.sealed(fake.url_verification(token="guess"), signed=False)
    assert (await fake.post(url, *wrong_token))[0] == 401

    event = fake.message_event(ALICE, chat, "signed hello")
    headers, body = fake.sealed(event)
    forgeries = fake.forgeries(event)
    statuses = {name: (await fake.post(url, *request))[0] for name, request in forgeries.items()}
    assert statuses == dict.fromkeys(forgeries, 401)
    accepted = await bot.daemon.metric(
        "octos_messages_in_total", profile="hooks", outcome="accepted"
    )
    assert accepted == 0
    assert (await fake.post(url, headers, body))[0] == 200
    assert (await fake.post(url, headers, body))[0] == 200  # Feishu's retry
    await bot.reply_shown(chat, "signed hello")
    assert fake.texts(chat) == ["signed hello"]


async def test_an_acknowledged_event_survives_sigkill_and_is_answered_once(
    tmp_path: Path,
) -> None:
    chat = "oc_survivor00000000000001"
    async with FakeFeishu() as fake:
        config = write_config(tmp_path, {"main": ws_profile(fake, delay_s=1.0, pieces=3)})
        first = DaemonProcess(config, env=DAEMON_ENV)
        await first.start()
        try:
            await fake.wait_connected(timeout_s=WAIT_S)
            # Nothing the first daemon sends is shown: its first piece would race the kill.
            fake.rate_limit_next("send", count=1000)
            await FeishuBot(fake, first).say(chat, "survive this")  # acknowledged: durable
            assert first.process is not None
            first.process.kill()
            await first.wait(WAIT_S)
        finally:
            await first.stop()
        assert fake.texts(chat) == []
        fake.stop_rate_limiting()
        second = DaemonProcess(config, env=DAEMON_ENV)
        await second.start()
        try:
            await fake.wait_until(lambda: fake.texts(chat) == ["survive this"], 15)
            assert await second.stop_cleanly() == 0
        finally:
            await second.stop()
        assert fake.texts(chat) == ["survive this"]


async def test_malformed_frames_are_skipped_and_the_connection_kept(bot: FeishuBot) -> None:
    fake, chat = bot.fake, bot.new_chat()
    opened = fake.connections_opened
    await fake.push_raw(b"\xff\x00 not protobuf")
    broken = await fake.push_event({"schema": "2.0", "header": {"event_type": "x"}})
    await fake.wait_until(lambda: fake.acked(broken), WAIT_S)
    await bot.say(chat, "still answering?")
    await bot.reply_shown(chat, "still answering?")
    assert fake.connections_opened == opened


async def test_a_reply_streaming_when_sigkilled_is_finished_in_its_card(tmp_path: Path) -> None:
    async with FakeFeishu() as fake:

        async def connected_anew(daemon: DaemonProcess) -> None:
            await daemon.wait_log(lambda event: event.get("event") == "feishu.ws_connected")
            await fake.wait_connected(timeout_s=WAIT_S)

        await assert_a_stream_cut_by_sigkill_is_finished_in_place(
            tmp_path,
            lambda delay_s, pieces: ws_profile(fake, delay_s=delay_s, pieces=pieces),
            lambda daemon: FeishuBot(fake, daemon),
            "oc_midstream0000000000001",
            ready=connected_anew,
        )
