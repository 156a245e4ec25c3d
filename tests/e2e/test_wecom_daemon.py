"""WeCom end to end: the daemon subprocess, its HTTP server taking WeCom's encrypted callbacks,
and the fake WeCom server API, with the keys of WeCom's documentation example."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, running_daemon, session_keys
from tests.e2e.echo_bot import WebhookBot, echo_profile
from tests.e2e.long_text import assert_split_well, mixed_text
from tests.fakes.wecom_server import MAX_CONTENT_BYTES, FakeWeCom
from tests.support.daemon import DaemonProcess, write_config

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

PATH = "/wecom/callback"


def wecom_profile(fake: FakeWeCom, *, delay_s: float = 0.0, pieces: int = 1) -> str:
    channel = f"""\
  - type: wecom
    corp_id: {fake.corp_id}
    agent_id: {fake.agent_id}
    secret: {fake.secret}
    token: {fake.token}
    encoding_aes_key: {fake.encoding_aes_key}
    api_base_url: {fake.base_url}
    webhook_path: {PATH}
    allow: [alice]
"""
    return echo_profile(channel, delay_s=delay_s, pieces=pieces)


@dataclass
class WeComBot(WebhookBot[FakeWeCom]):
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    path = PATH

    def new_user(self) -> str:
        user = f"user{next(self.numbers):04d}"
        self.fake.users.add(user)
        return user

    async def say(self, user: str, text: str) -> None:
        assert await self.fake.post_message(self.url, self.fake.text_message(user, text)) == (
            200,
            "",
        )

    def shown(self, user: str) -> list[str]:
        return self.fake.texts(user)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WeComBot]:
    """One daemon whose profile allows everyone, for the tests that need no allow list."""
    directory = tmp_path_factory.mktemp("wecom")
    async with FakeWeCom() as fake:
        profile = wecom_profile(fake).replace("allow: [alice]", 'allow: ["*"]')
        async with running_daemon(directory, {"main": profile}) as daemon:
            await fake.wait_until(lambda: fake.token_calls >= 1, WAIT_S)
            yield WeComBot(fake, daemon)


async def test_an_allowed_user_gets_the_echo_a_stranger_one_notice_and_sigterm_exits_0(
    tmp_path: Path,
) -> None:
    async with FakeWeCom() as fake, running_daemon(tmp_path, {"main": wecom_profile(fake)}) as d:
        await fake.wait_until(lambda: fake.token_calls >= 1, WAIT_S)
        bot = WeComBot(fake, d)
        assert await fake.verify_url(bot.url) == (200, "1616140317555161061")
        await bot.say("mallory", "let me in")
        await bot.say("mallory", "please?")
        await bot.say("alice", "你好，企业微信")
        await fake.wait_until(lambda: fake.texts("alice") == ["你好，企业微信"], WAIT_S)
        refused = await d.metric(
            "octos_messages_in_total", profile="main", channel="wecom", outcome="refused"
        )
        assert refused == 2
        assert await d.stop_cleanly() == 0

    [notice] = fake.texts("mallory")
    assert "mallory" in notice
    keys = session_keys(tmp_path / "data")
    assert "main:wecom:alice" in keys
    assert not [key for key in keys if "mallory" in key], keys


async def test_a_long_mixed_reply_arrives_whole_in_pieces_within_2048_bytes(
    bot: WeComBot,
) -> None:
    user, text = bot.new_user(), mixed_text()
    chunks = await bot.reply_shown_in(user, text)
    assert all(len(chunk.encode()) <= MAX_CONTENT_BYTES for chunk in chunks)
    assert_split_well(text, chunks, fences_shown=True)
    assert [m.errcode for m in bot.fake.sent if m.touser == user] == [0] * (len(chunks) + 1)


async def test_a_rate_limit_is_waited_out_and_the_reply_delivered_once(bot: WeComBot) -> None:
    user = bot.new_user()
    bot.fake.rate_limit_next()
    await bot.say(user, "patience, please")
    await bot.barrier(user)

    assert bot.fake.texts(user)[0] == "patience, please"
    assert [m.errcode for m in bot.fake.sent if m.touser == user] == [45009, 0, 0]
    retries = await bot.daemon.metric(
        "octos_send_retries_total", channel="wecom", reason="rate_limited"
    )
    assert retries >= 1


async def test_a_retried_callback_is_answered_once(bot: WeComBot) -> None:
    user = bot.new_user()
    plain = bot.fake.text_message(user, "did you get this?")
    for _attempt in range(3):  # WeCom retries a callback three times
        assert await bot.fake.post_message(bot.url, plain) == (200, "")
    await bot.barrier(user)
    assert bot.fake.texts(user)[:-1] == ["did you get this?"]


async def test_forged_stale_unsigned_and_foreign_callbacks_are_refused(bot: WeComBot) -> None:
    fake, user = bot.fake, bot.new_user()
    forgeries = fake.forgeries(fake.text_message(user, "forged"))
    for name, (expected, query, body) in forgeries.items():
        assert (await fake.post_callback(bot.url, query, body))[0] == expected, name
    await bot.barrier(user)
    assert fake.texts(user)[:-1] == []


async def test_an_acknowledged_message_survives_sigkill_and_is_answered_once(
    tmp_path: Path,
) -> None:
    async with FakeWeCom() as fake:
        config = write_config(tmp_path, {"main": wecom_profile(fake, delay_s=1.0, pieces=3)})
        first = DaemonProcess(config, env=DAEMON_ENV)
        await first.start()
        try:
            await fake.wait_until(lambda: fake.token_calls >= 1, WAIT_S)
            bot = WeComBot(fake, first)
            await bot.say("alice", "survive this")  # 200: durable from here on
            assert first.process is not None
            first.process.kill()
            await first.wait(WAIT_S)
        finally:
            await first.stop()
        assert fake.texts("alice") == []
        second = DaemonProcess(config, env=DAEMON_ENV)
        await second.start()
        try:
            await fake.wait_until(lambda: fake.texts("alice") == ["survive this"], 15)
            assert await second.stop_cleanly() == 0
        finally:
            await second.stop()
        assert fake.texts("alice") == ["survive this"]


async def test_malformed_callbacks_are_refused_and_the_channel_keeps_answering(
    bot: WeComBot,
) -> None:
    fake, user = bot.fake, bot.new_user()
    query, _body = fake.sealed(fake.text_message(user, "x"))
    assert (await fake.post_callback(bot.url, query, b"<xml><Encrypt>"))[0] == 400
    assert (await fake.post_callback(bot.url, query, b"not xml at all"))[0] == 400
    # Signed and encrypted, but not a message: acknowledged, so WeCom does not retry it.
    assert await fake.post_message(bot.url, b"<xml><oops") == (200, "")
    await bot.barrier(user)
    assert fake.texts(user)[:-1] == []
