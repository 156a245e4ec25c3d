"""Discord end to end: the daemon subprocess, discord.py, and the fake Discord."""

from __future__ import annotations

import itertools
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.conftest import EDIT_INTERVAL_S, WAIT_S, logged, running_daemon, session_keys
from tests.e2e.echo_bot import (
    EchoBot,
    assert_a_stream_cut_by_sigkill_is_finished_in_place,
    assert_edited_at_the_interval,
    echo_profile,
)
from tests.e2e.long_text import assert_split_well, mixed_text
from tests.fakes.discord_server import FakeDiscord, FakeUser, RecordedRequest
from tests.support.daemon import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ALICE = FakeUser(id=111_111_111_111_111_111, username="alice")
BOB = FakeUser(id=111_111_111_111_111_112, username="bob")
MALLORY = FakeUser(id=666_666_666_666_666_666, username="mallory")
DISCORD_LIMIT_CHARS = 2000


def discord_profile(fake: FakeDiscord, *, delay_s: float = 0.3, pieces: int = 8) -> str:
    # Alice is allowed by her id, Bob by his username.
    channel = f"""\
  - type: discord
    token: "{fake.token}"
    api_base_url: {fake.api_base_url}
    gateway_url: {fake.gateway_url}
    edit_interval_s: {EDIT_INTERVAL_S}
    allow: [{ALICE.id}, "@bob"]
"""
    return echo_profile(channel, delay_s=delay_s, pieces=pieces)


def contents(fake: FakeDiscord, channel_id: int) -> list[str]:
    return [str(message["content"]) for message in fake.bot_messages(channel_id)]


def posts(fake: FakeDiscord, channel_id: int) -> list[RecordedRequest]:
    return fake.requests_to("POST", rf"/channels/{channel_id}/messages")


def edits_of(
    fake: FakeDiscord, channel_id: int, message_id: object = r"\d+"
) -> list[RecordedRequest]:
    return fake.requests_to("PATCH", rf"/channels/{channel_id}/messages/{message_id}")


async def connected(daemon: DaemonProcess, fake: FakeDiscord) -> None:
    await daemon.wait_log(logged("discord.gateway_ready"))
    await fake.wait_ready(WAIT_S)


@dataclass
class DiscordBot(EchoBot[int]):
    fake: FakeDiscord
    daemon: DaemonProcess
    channel_ids: itertools.count[int] = field(
        default_factory=lambda: itertools.count(300_000_000_000_000_001)
    )

    def new_dm(self) -> int:
        return next(self.channel_ids)

    async def say(self, channel_id: int, text: str) -> dict[str, Any]:
        return await self.fake.push_message(channel_id, ALICE, text)

    def shown(self, channel_id: int) -> list[str]:
        return contents(self.fake, channel_id)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        await self.fake.wait_until(condition, WAIT_S)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DiscordBot]:
    directory = tmp_path_factory.mktemp("discord")
    async with (
        FakeDiscord() as fake,
        running_daemon(directory, {"main": discord_profile(fake)}) as daemon,
    ):
        await connected(daemon, fake)
        yield DiscordBot(fake, daemon)


async def test_allowed_users_get_the_echo_a_stranger_one_notice_and_sigterm_exits_0(
    tmp_path: Path,
) -> None:
    alice_dm, bob_dm, mallory_dm = (
        300_000_000_000_000_101,
        300_000_000_000_000_102,
        300_000_000_000_000_103,
    )
    async with (
        FakeDiscord() as fake,
        running_daemon(tmp_path, {"main": discord_profile(fake, delay_s=0.05, pieces=2)}) as d,
    ):
        await connected(d, fake)
        # The stranger writes first: once Alice is answered, both were dispatched.
        await fake.push_message(mallory_dm, MALLORY, "let me in")
        await fake.push_message(mallory_dm, MALLORY, "please?")
        from_alice = await fake.push_message(alice_dm, ALICE, "hello from alice")
        await fake.push_message(bob_dm, BOB, "hello from bob")
        await fake.wait_until(
            lambda: (
                contents(fake, alice_dm) == ["hello from alice"]
                and contents(fake, bob_dm) == ["hello from bob"]
            ),
            WAIT_S,
        )
        refused = await d.metric(
            "octos_messages_in_total", profile="main", channel="discord", outcome="refused"
        )
        assert refused == 2
        assert await d.stop_cleanly() == 0

    # Shutdown delivers everything in hand, so what the fake holds now is complete.
    [reply] = fake.bot_messages(alice_dm)
    assert reply["message_reference"]["message_id"] == from_alice["id"]
    [notice] = contents(fake, mallory_dm)
    assert str(MALLORY.id) in notice
    # The agent's turns show "typing"; nothing of the kind happened in the stranger's chat.
    assert fake.requests_to("POST", rf"/channels/{alice_dm}/typing")
    assert not fake.requests_to("POST", rf"/channels/{mallory_dm}/typing")
    keys = session_keys(tmp_path / "data")
    assert f"main:discord:{alice_dm}" in keys
    assert not [key for key in keys if str(mallory_dm) in key], keys
    # The bot closed its gateway connection on the way out.
    assert fake.live_sessions == []
    assert not fake.gateway.connections


async def test_a_long_mixed_reply_arrives_in_natural_chunks_within_the_limit(
    bot: DiscordBot,
) -> None:
    fake, dm, text = bot.fake, bot.new_dm(), mixed_text()
    chunks = await bot.reply_shown_in(dm, text)
    assert all(len(chunk) <= DISCORD_LIMIT_CHARS for chunk in chunks)
    assert_split_well(text, chunks, fences_shown=True)
    # Shown as a stream that rolled over while it grew: a message opened for the rest was
    # edited too, and no request was refused (too long, too fast).
    calls = posts(fake, dm) + edits_of(fake, dm)
    assert [call.status for call in calls] == [200] * len(calls)
    assert len({call.path for call in edits_of(fake, dm)}) >= 2


async def test_a_streamed_reply_is_edited_at_the_configured_rate_without_a_duplicate(
    bot: DiscordBot,
) -> None:
    fake, dm = bot.fake, bot.new_dm()
    text = await bot.streamed_reply_delivered(dm)

    reply, _barrier = fake.bot_messages(dm)
    assert reply["content"] == text
    sent = posts(fake, dm)[0]
    edits = edits_of(fake, dm, reply["id"])
    assert edits, "a slow reply is shown growing"
    shown = [sent, *edits]
    assert [call.status for call in shown] == [200] * len(shown)
    assert_edited_at_the_interval(
        [call.at for call in shown], [str(call.content) for call in shown]
    )


async def test_a_429_is_waited_out_and_the_reply_delivered_once(bot: DiscordBot) -> None:
    fake, dm = bot.fake, bot.new_dm()
    before = await bot.daemon.rate_limited_retries("discord")
    # Without `Via`, discord.py does not wait by itself: the manager's retry policy does.
    fake.rate_limit_next("POST", rf"/channels/{dm}/messages", retry_after_s=1.0, via=False)
    await bot.say(dm, "patience, please")
    await bot.barrier(dm)

    assert contents(fake, dm)[0] == "patience, please"
    assert [call.status for call in posts(fake, dm)] == [429, 200, 200]
    assert await bot.daemon.rate_limited_retries("discord") > before


async def test_a_dropped_gateway_resumes_and_answers_once(bot: DiscordBot) -> None:
    fake, dm = bot.fake, bot.new_dm()
    resumes, refused = fake.resume_count, fake.refused_count
    fake.gateway_available = False
    await fake.drop_connections()
    await fake.wait_until(lambda: fake.refused_count > refused, WAIT_S)
    # Written while the bot is away: Discord replays it on RESUME.
    message = await bot.say(dm, "are you still there")
    fake.gateway_available = True
    await fake.wait_until(lambda: fake.resume_count > resumes and fake.live_sessions, WAIT_S)
    await bot.reply_shown(dm, "are you still there")
    # Discord sends the same message again.
    await fake.push_dispatch("MESSAGE_CREATE", message)
    await bot.barrier(dm)

    assert contents(fake, dm)[0] == "are you still there"
    assert len(contents(fake, dm)) == 2
    assert (
        await bot.daemon.metric("octos_messages_in_total", channel="discord", outcome="duplicate")
        >= 1
    )


async def test_malformed_events_and_frames_are_logged_and_skipped(bot: DiscordBot) -> None:
    fake, daemon, dm = bot.fake, bot.daemon, bot.new_dm()
    malformed = daemon.count_logged("discord.malformed_event_skipped")
    undecodable = daemon.count_logged("discord.undecodable_gateway_frame")
    identified = fake.identify_count
    await fake.push_dispatch("MESSAGE_CREATE", {"id": "not-a-number", "channel_id": "1"})
    await fake.push_dispatch("MESSAGE_CREATE", {"content": "no ids at all"})
    await bot.say(dm, "still answering?")
    await bot.reply_shown(dm, "still answering?")
    assert daemon.count_logged("discord.malformed_event_skipped") == malformed + 2

    # A frame that is not JSON at all breaks the compressed stream: the bot connects anew.
    await fake.push_raw_frame("this is not JSON {")
    await fake.wait_until(lambda: fake.identify_count > identified and fake.live_sessions, WAIT_S)
    await bot.say(dm, "and now?")
    await bot.reply_shown(dm, "and now?")
    assert daemon.count_logged("discord.undecodable_gateway_frame") == undecodable + 1


async def test_messages_posted_while_the_daemon_was_down_are_caught_up_once(
    tmp_path: Path,
) -> None:
    dm = 300_000_000_000_000_201
    async with FakeDiscord() as fake:
        profiles = {"main": discord_profile(fake, delay_s=0.05, pieces=1)}
        async with running_daemon(tmp_path, profiles) as daemon:
            await connected(daemon, fake)
            await fake.push_message(dm, ALICE, "before the outage")
            await fake.wait_until(lambda: contents(fake, dm) == ["before the outage"], WAIT_S)
            # The book of handled chats is written at the first message, then at most once a
            # second and on the way out: a SIGKILL now still finds this chat in it.
            await daemon.wait_log(logged("discord.handled_book_saved"))
            daemon.signal(signal.SIGKILL)
            await daemon.wait()
        # Discord keeps nothing for a bot that is away: these exist only in the history.
        await fake.post_while_offline(dm, ALICE, "while you were away")
        await fake.post_while_offline(dm, ALICE, "and once more")
        async with running_daemon(tmp_path, profiles) as daemon:
            await connected(daemon, fake)
            await fake.wait_until(
                lambda: contents(fake, dm)[-2:] == ["while you were away", "and once more"],
                WAIT_S,
            )
            await fake.push_message(dm, ALICE, "live again")
            await fake.wait_until(lambda: contents(fake, dm)[-1:] == ["live again"], WAIT_S)
        assert contents(fake, dm) == [
            "before the outage",
            "while you were away",
            "and once more",
            "live again",
        ]


async def test_a_reply_streaming_when_sigkilled_is_finished_in_its_message(
    tmp_path: Path,
) -> None:
    async with FakeDiscord() as fake:
        await assert_a_stream_cut_by_sigkill_is_finished_in_place(
            tmp_path,
            lambda delay_s, pieces: discord_profile(fake, delay_s=delay_s, pieces=pieces),
            lambda daemon: DiscordBot(fake, daemon),
            300_000_000_000_000_301,
            ready=lambda daemon: connected(daemon, fake),
        )
