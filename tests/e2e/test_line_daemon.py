"""LINE end to end: the daemon subprocess, line-bot-sdk, and the fake LINE Platform.

The fake posts signed webhook requests to the daemon's own HTTP server, as LINE does, and takes
the daemon's replies and pushes on its Messaging API.
"""

from __future__ import annotations

import itertools
import json
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from channels.split.limits import utf16_units
from tests.channels.line.attacks import ATTACK_NAMES, attack_cases
from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged, running_daemon, session_keys
from tests.e2e.echo_bot import WebhookBot, echo_profile
from tests.e2e.long_text import assert_split_well, mixed_text
from tests.fakes.line_server import FakeLine
from tests.support.daemon import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ALICE = "U1111111111111111111111111111a11"
MALLORY = "U6666666666666666666666666666m66"
PATH = "/line/webhook"
LINE_LIMIT_UTF16 = 5000


def line_profile(
    fake: FakeLine,
    *,
    delay_s: float = 0.05,
    pieces: int = 2,
    path: str = PATH,
    token: str | None = None,
) -> str:
    channel = f"""\
  - type: line
    channel_secret: "{fake.channel_secret}"
    channel_access_token: "{token or fake.access_token}"
    webhook_path: {path}
    api_base_url: {fake.api_base_url}
    data_api_base_url: {fake.data_api_base_url}
    allow: [{ALICE}]
"""
    return echo_profile(channel, delay_s=delay_s, pieces=pieces)


@dataclass
class LineBot(WebhookBot[FakeLine]):
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    path = PATH

    def new_user(self) -> str:
        return f"U{next(self.numbers):031x}"

    async def say(self, user: str, text: str) -> dict[str, Any]:
        event = self.fake.text_event(user, text)
        assert await self.fake.deliver(self.url, [event]) == 200
        return event

    def shown(self, user: str) -> list[str]:
        return self.fake.texts_to(user)


async def receiving(daemon: DaemonProcess, count: int = 1) -> None:
    await daemon.wait_log(
        lambda _e: sum(1 for e in daemon.logs if e.get("event") == "line.receiving") >= count
    )


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LineBot]:
    directory = tmp_path_factory.mktemp("line")
    async with FakeLine() as fake, running_daemon(directory, {"main": line_profile(fake)}) as d:
        await receiving(d)
        yield LineBot(fake, d)


async def test_an_allowed_user_gets_the_echo_a_stranger_one_notice_and_sigterm_exits_0(
    tmp_path: Path,
) -> None:
    async with (
        FakeLine() as fake,
        running_daemon(tmp_path, {"main": line_profile(fake, delay_s=0.3, pieces=4)}) as d,
    ):
        await receiving(d)
        url = d.http_url + PATH
        for text in ("let me in", "please?"):
            assert await fake.deliver(url, [fake.text_event(MALLORY, text)]) == 200
        assert await fake.deliver(url, [fake.text_event(ALICE, "hello from alice")]) == 200
        await fake.wait_until(lambda: fake.texts_to(ALICE) == ["hello from alice"], WAIT_S)
        refused = await d.metric(
            "octos_messages_in_total", profile="main", channel="line", outcome="refused"
        )
        assert refused == 2
        assert await d.stop_cleanly() == 0

    [answer] = fake.delivered_to(ALICE)
    assert answer.via == "reply"  # answered with the free reply token, not a push
    assert fake.loading
    assert fake.loading[0]["chatId"] == ALICE
    [notice] = fake.texts_to(MALLORY)
    assert MALLORY in notice
    keys = session_keys(tmp_path / "data")
    assert f"main:line:{ALICE}" in keys
    assert not [key for key in keys if MALLORY in key], keys


async def test_a_long_mixed_reply_arrives_complete_within_the_limit(bot: LineBot) -> None:
    text, before = mixed_text(), len(bot.fake.texts_to(ALICE))
    await bot.say(ALICE, text)
    await bot.barrier(ALICE)
    *chunks, _barrier = bot.fake.texts_to(ALICE)[before:]
    assert all(utf16_units(chunk) <= LINE_LIMIT_UTF16 for chunk in chunks)
    assert_split_well(text, chunks, fences_shown=True)
    # The first part used the reply token; the others were pushed, each with its own key.
    parts = bot.fake.delivered_to(ALICE)[before : before + len(chunks)]
    assert [part.via for part in parts] == ["reply"] + ["push"] * (len(chunks) - 1)
    assert len({part.retry_key for part in parts[1:]}) == len(chunks) - 1


async def test_a_rate_limited_send_is_waited_out_and_delivered_once(bot: LineBot) -> None:
    before = await bot.daemon.rate_limited_retries("line")
    bot.fake.rate_limit_next("/v2/bot/message/reply")
    await bot.say(ALICE, "patience, please")
    await bot.barrier(ALICE)
    assert bot.fake.texts_to(ALICE)[-2:] == ["patience, please", bot.fake.texts_to(ALICE)[-1]]
    assert bot.fake.texts_to(ALICE).count("patience, please") == 1
    assert await bot.daemon.rate_limited_retries("line") > before


async def test_forged_stale_and_unsigned_webhooks_are_refused(bot: LineBot) -> None:
    fake = bot.fake
    accepted = await bot.daemon.metric("octos_messages_in_total", outcome="accepted")
    cases = attack_cases(fake)
    assert [case.name for case in cases] == list(ATTACK_NAMES)
    for case in cases:
        assert await fake.post_webhook(bot.url, case.body, case.headers) == case.status, case.name
    await bot.barrier(ALICE)
    assert await bot.daemon.metric("octos_messages_in_total", outcome="accepted") == accepted + 1
    assert not {"let me in", "let me IN", "old news"} & set(fake.texts_to(ALICE))
    refusals = [e["reason"] for e in bot.daemon.logs if e.get("event") == "line.webhook_refused"]
    assert sorted(refusals) == sorted(case.reason for case in cases)


async def test_a_redelivered_webhook_is_answered_once(bot: LineBot) -> None:
    event = await bot.say(ALICE, "just once")
    redelivered = json.loads(json.dumps(event))
    redelivered["deliveryContext"]["isRedelivery"] = True
    assert await bot.fake.deliver(bot.url, [redelivered]) == 200
    await bot.barrier(ALICE)
    assert bot.fake.texts_to(ALICE).count("just once") == 1


async def test_a_wrong_token_marks_line_down_and_the_other_profile_keeps_answering(
    tmp_path: Path,
) -> None:
    async with FakeLine() as fake:
        profiles = {
            "good": line_profile(fake),
            "bad": line_profile(fake, path="/line/other", token="revoked-token"),
        }
        async with running_daemon(tmp_path, profiles) as daemon:
            await daemon.wait_log(logged("channel.down"))
            await receiving(daemon)
            status, body = await daemon.get("/readyz")
            assert status == 503
            assert '"status": "down"' in body
            assert "channel_access_token" in body
            event = fake.text_event(ALICE, "still there?")
            assert await fake.deliver(daemon.http_url + PATH, [event]) == 200
            await fake.wait_until(lambda: fake.texts_to(ALICE) == ["still there?"], WAIT_S)


async def test_an_acknowledged_message_survives_sigkill_and_is_answered_once(
    tmp_path: Path,
) -> None:
    async with FakeLine() as fake:
        # A slow echo: the daemon is killed after LINE got its 200, before the reply.
        profile = line_profile(fake, delay_s=5.0, pieces=2)
        async with running_daemon(tmp_path, {"main": profile}) as first:
            await receiving(first)
            event = fake.text_event(ALICE, "do not lose me")
            assert await fake.deliver(first.http_url + PATH, [event]) == 200
            first.signal(signal.SIGKILL)
            await first.wait(WAIT_S)
        assert fake.texts_to(ALICE) == []
        restarted = DaemonProcess(tmp_path / "gateway.yaml", env=DAEMON_ENV)
        try:
            await restarted.start()
            await receiving(restarted)
            # A later message in the same chat is answered after the recovered one (a chat's
            # turns run in order), so once it is answered the recovered reply is in too.
            after = fake.text_event(ALICE, "and me")
            assert await fake.deliver(restarted.http_url + PATH, [after]) == 200
            await fake.wait_until(lambda: "and me" in fake.texts_to(ALICE), WAIT_S)
            assert await restarted.stop_cleanly() == 0
        finally:
            await restarted.stop()
        assert fake.texts_to(ALICE) == ["do not lose me", "and me"]
