"""Slack end to end: the daemon subprocess, slack-bolt and slack_sdk, and the fake Slack.

The shared daemon runs two profiles against one fake: `main` over Socket Mode and `hooks` in
HTTP mode, whose events the daemon's own HTTP server receives at the webhook path.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from tests.e2e.conftest import EDIT_INTERVAL_S, WAIT_S, running_daemon, session_keys
from tests.e2e.echo_bot import (
    EchoBot,
    assert_a_stream_cut_by_sigkill_is_finished_in_place,
    assert_edited_at_the_interval,
    echo_profile,
)
from tests.e2e.long_text import assert_split_well, mixed_text
from tests.e2e.slack_profiles import WEBHOOK_PATH, slack_http_profile
from tests.fakes.slack_server import FakeSlack, RecordedRequest, sign_request
from tests.support.daemon import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ALICE, MALLORY = "UALICE0001", "UMALLORY01"
GENERAL = "CGENERAL01"
SLACK_LIMIT_CHARS = 4000


def socket_profile(fake: FakeSlack, *, delay_s: float = 0.3, pieces: int = 8) -> str:
    channel = f"""\
  - type: slack
    bot_token: "{fake.bot_token}"
    app_token: "{fake.app_token}"
    base_url: {fake.base_url}
    edit_interval_s: {EDIT_INTERVAL_S}
    allow: [{ALICE}]
"""
    return echo_profile(channel, delay_s=delay_s, pieces=pieces)


def texts(fake: FakeSlack, channel: str) -> list[str]:
    return [str(message["text"]) for message in fake.bot_messages(channel)]


def calls_to(fake: FakeSlack, method: str, channel: str) -> list[RecordedRequest]:
    return [call for call in fake.calls(method) if call.params.get("channel") == channel]


@dataclass
class SlackBot(EchoBot[str]):
    fake: FakeSlack
    daemon: DaemonProcess
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_dm(self) -> str:
        return f"DTEST{next(self.numbers):05d}"

    async def say(self, channel: str, text: str, *, user: str = ALICE) -> dict[str, Any]:
        event = self.fake.user_message(channel, user, text, channel_type="im")
        await self.fake.push_event(event)
        return event

    def shown(self, channel: str) -> list[str]:
        return texts(self.fake, channel)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        await self.fake.wait_until(condition, WAIT_S)


async def connected(fake: FakeSlack, daemon: DaemonProcess, *, profiles: int) -> None:
    """Socket Mode is connected, and every profile's channel takes events."""
    await fake.wait_connected(timeout_s=WAIT_S)
    await daemon.wait_logged("slack.receiving", more_than=profiles - 1)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SlackBot]:
    directory = tmp_path_factory.mktemp("slack")
    async with (
        FakeSlack() as fake,
        running_daemon(
            directory, {"main": socket_profile(fake), "hooks": slack_http_profile(fake, ALICE)}
        ) as daemon,
    ):
        await connected(fake, daemon, profiles=2)
        yield SlackBot(fake, daemon)


async def test_an_allowed_user_gets_the_echo_a_stranger_one_notice_and_sigterm_exits_0(
    tmp_path: Path,
) -> None:
    stranger_dm = "DMALLORY01"
    async with (
        FakeSlack() as fake,
        running_daemon(tmp_path, {"main": socket_profile(fake, delay_s=0.05, pieces=2)}) as d,
    ):
        await connected(fake, d, profiles=1)
        # The stranger writes first: once Alice is answered, both were dispatched.
        for text in ("let me in", "please?"):
            await fake.push_event(fake.user_message(stranger_dm, MALLORY, text, channel_type="im"))
        post = fake.user_message(GENERAL, ALICE, "hello from alice")
        await fake.push_event(post)
        await fake.wait_until(lambda: texts(fake, GENERAL) == ["hello from alice"], WAIT_S)
        refused = await d.metric(
            "octos_messages_in_total", profile="main", channel="slack", outcome="refused"
        )
        assert refused == 2
        assert await d.stop_cleanly() == 0

    # Shutdown delivers everything in hand, so what the fake holds now is complete.
    [reply] = fake.bot_messages(GENERAL)
    assert reply["thread_ts"] == post["ts"]  # in a channel, the answer is a thread on the post
    [notice] = texts(fake, stranger_dm)
    assert MALLORY in notice
    keys = session_keys(tmp_path / "data")
    assert f"main:slack:{GENERAL}" in keys
    assert not [key for key in keys if stranger_dm in key], keys
    assert fake.open_connections == 0


async def test_a_long_mixed_reply_arrives_in_natural_chunks_within_the_limit(
    bot: SlackBot,
) -> None:
    fake, dm, text = bot.fake, bot.new_dm(), mixed_text()
    chunks = await bot.reply_shown_in(dm, text)
    assert all(len(chunk) <= SLACK_LIMIT_CHARS for chunk in chunks)
    assert_split_well(text, chunks, fences_shown=True)
    # Shown as a stream that rolled over while it grew: a message opened for the rest was
    # edited too, and no request was refused.
    calls = calls_to(fake, "chat.postMessage", dm) + calls_to(fake, "chat.update", dm)
    assert [call.error for call in calls] == [None] * len(calls)
    assert len({call.params["ts"] for call in calls_to(fake, "chat.update", dm)}) >= 2


async def test_a_streamed_reply_is_edited_at_the_configured_rate_without_a_duplicate(
    bot: SlackBot,
) -> None:
    fake, dm = bot.fake, bot.new_dm()
    text = await bot.streamed_reply_delivered(dm)

    reply, _barrier = fake.bot_messages(dm)
    assert reply["text"] == text
    sent = calls_to(fake, "chat.postMessage", dm)[0]
    edits = [call for call in calls_to(fake, "chat.update", dm) if call.params["ts"] == reply["ts"]]
    assert edits, "a slow reply is shown growing"
    shown = [sent, *edits]
    assert [call.error for call in shown] == [None] * len(shown)
    assert_edited_at_the_interval(
        [call.at for call in shown], [str(call.params["text"]) for call in shown]
    )


async def test_a_429_is_waited_out_and_the_reply_delivered_once(bot: SlackBot) -> None:
    fake, dm = bot.fake, bot.new_dm()
    before = await bot.daemon.rate_limited_retries("slack")
    fake.rate_limit_next("chat.postMessage", retry_after_s=1)
    await bot.say(dm, "patience, please")
    await bot.barrier(dm)

    assert texts(fake, dm)[0] == "patience, please"
    statuses = [call.status for call in calls_to(fake, "chat.postMessage", dm)]
    assert statuses == [429, 200, 200]  # the reply, refused once, then the barrier's reply
    assert await bot.daemon.rate_limited_retries("slack") > before


async def test_a_dropped_socket_reconnects_and_a_redelivered_event_is_answered_once(
    bot: SlackBot,
) -> None:
    fake, dm = bot.fake, bot.new_dm()
    opened = fake.connections_opened
    await fake.drop_connections()
    await fake.wait_connected(count=opened + 1, timeout_s=WAIT_S)
    event = fake.user_message(dm, ALICE, "are you still there", channel_type="im")
    event_id, _envelope = await fake.push_event(event)
    await bot.reply_shown(dm, "are you still there")
    # Slack delivers the event again (as it does when it saw no ack in time).
    await fake.push_event(event, event_id=event_id, retry_attempt=1, retry_reason="timeout")
    await bot.barrier(dm)

    assert texts(fake, dm) == ["are you still there", texts(fake, dm)[-1]]
    assert texts(fake, dm)[-1].startswith("barrier")


async def test_malformed_frames_and_events_are_logged_and_skipped(bot: SlackBot) -> None:
    fake, daemon, dm = bot.fake, bot.daemon, bot.new_dm()
    callbacks = daemon.count_logged("slack.event_callback_malformed")
    events = daemon.count_logged("slack.malformed_event_skipped")
    await fake.push_raw("this is not JSON {")
    await fake.push_raw(json.dumps({"type": "events_api", "envelope_id": "e-1", "payload": 7}))
    not_an_object = fake.event_callback({"type": "message"}) | {"event": "not an object"}
    await fake.push_envelope({"type": "events_api", "envelope_id": "e-2", "payload": not_an_object})
    await fake.push_event({"type": "message", "user": ALICE, "text": "whose channel?", "ts": "1.0"})
    await bot.say(dm, "still answering?")
    await bot.reply_shown(dm, "still answering?")

    assert daemon.count_logged("slack.event_callback_malformed") == callbacks + 1
    assert daemon.count_logged("slack.malformed_event_skipped") == events + 1
    assert texts(fake, dm) == ["still answering?"]


async def test_http_mode_refuses_forged_and_stale_requests_and_answers_a_signed_one(
    bot: SlackBot,
) -> None:
    fake = bot.fake
    url = bot.daemon.http_url + WEBHOOK_PATH
    dm = bot.new_dm()
    event = fake.user_message(dm, ALICE, "signed hello", channel_type="im")
    body = json.dumps(fake.event_callback(event)).encode()
    forged = {**fake.sign(body), "X-Slack-Signature": "v0=" + "0" * 64}
    wrong_secret = sign_request("not-the-signing-secret", body)
    stale = fake.sign(body, timestamp=int(time.time()) - 600)

    async with aiohttp.ClientSession() as http:
        for headers in (forged, wrong_secret, stale):
            async with http.post(url, data=body, headers=headers) as response:
                assert response.status == 401
        accepted = await bot.daemon.metric(
            "octos_messages_in_total", profile="hooks", outcome="accepted"
        )
        assert accepted == 0  # nothing was published
        async with http.post(url, data=body, headers=fake.sign(body)) as response:
            assert response.status == 200
    await bot.reply_shown(dm, "signed hello")

    assert texts(fake, dm) == ["signed hello"]
    assert (
        await bot.daemon.metric("octos_messages_in_total", profile="hooks", outcome="accepted") == 1
    )


async def test_a_reply_streaming_when_sigkilled_is_finished_in_its_message(
    tmp_path: Path,
) -> None:
    async with FakeSlack() as fake:
        await assert_a_stream_cut_by_sigkill_is_finished_in_place(
            tmp_path,
            lambda delay_s, pieces: socket_profile(fake, delay_s=delay_s, pieces=pieces),
            lambda daemon: SlackBot(fake, daemon),
            "DMIDSTREAM1",
            ready=lambda daemon: connected(fake, daemon, profiles=1),
        )
