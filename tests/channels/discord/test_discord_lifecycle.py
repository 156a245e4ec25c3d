"""Start, stop, cancellation, bad tokens, health, and a gateway that drops."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import NamedTuple

import discord
import pytest

from bus import BusPublisher, create_bus
from channels.discord import DiscordChannel
from channels.errors import FatalChannelError, TransientError
from channels.health import HealthStatus
from tests.channels.discord.conftest import (
    ALICE,
    DM_CHANNEL,
    WAIT_S,
    RunningBot,
    make_channel,
    run_bot,
)
from tests.fakes.discord_server import FakeDiscord

MESSAGE_CONTENT_INTENT = 1 << 15
DIRECT_MESSAGES_INTENT = 1 << 12


async def test_the_bot_identifies_with_message_content_and_a_compressed_stream(
    bot: RunningBot,
) -> None:
    [identify] = bot.fake.identify_payloads
    assert identify["token"] == bot.fake.token
    assert identify["intents"] & MESSAGE_CONTENT_INTENT
    assert identify["intents"] & DIRECT_MESSAGES_INTENT
    [query] = bot.fake.connect_queries
    assert query == {"v": "10", "encoding": "json", "compress": "zlib-stream"}
    # Login went to the fake's REST API, not discord.com.
    assert [r.path for r in bot.fake.requests[:2]] == ["/users/@me", "/oauth2/applications/@me"]


async def test_health_follows_the_gateway_connection(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    channel = make_channel(fake_discord, tmp_path)
    assert (await channel.health_check()).status is HealthStatus.UNKNOWN

    async with run_bot(fake_discord, tmp_path) as running:
        channel = running.channel
        assert (await channel.health_check()).status is HealthStatus.HEALTHY

        fake_discord.gateway_available = False
        await fake_discord.drop_connections()
        await fake_discord.wait_until(lambda: fake_discord.refused_count >= 1)
        health = await channel.health_check()
        assert health.status is HealthStatus.DEGRADED
        assert "reconnecting" in health.reason

        fake_discord.gateway_available = True
        async with asyncio.timeout(WAIT_S):
            await channel.wait_receiving()
        assert (await channel.health_check()).status is HealthStatus.HEALTHY

    health = await channel.health_check()
    assert health.status is HealthStatus.DOWN
    assert health.reason == "stopped"


async def test_a_dropped_connection_resumes_and_nothing_is_answered_twice(
    bot: RunningBot,
) -> None:
    fake = bot.fake
    before = await fake.push_message(DM_CHANNEL, ALICE, "before the drop")
    assert (await bot.next_inbound()).message_id == before["id"]

    fake.gateway_available = False
    await fake.drop_connections()
    await fake.wait_until(lambda: fake.refused_count >= 1)
    # Sent while the bot is away: Discord keeps it in the session and replays it on RESUME.
    during = await fake.push_message(DM_CHANNEL, ALICE, "during the drop")
    fake.gateway_available = True
    await fake.wait_until(lambda: fake.resume_count == 1 and fake.live_sessions)
    after = await fake.push_message(DM_CHANNEL, ALICE, "after the drop")

    assert (await bot.next_inbound()).message_id == during["id"]
    assert (await bot.next_inbound()).message_id == after["id"]
    assert bot.queued_inbound() == 0
    assert fake.identify_count == 1  # resumed, not a new session


class BareStart(NamedTuple):
    channel: DiscordChannel
    publisher: BusPublisher
    task: asyncio.Task[None]


async def started_bare(fake: FakeDiscord, data_dir: Path) -> BareStart:
    """The channel's `start()` on a fresh bus as a task the test itself ends, once the fake saw
    it log in: for the tests of stop and cancellation (`run_bot` ends it for the others)."""
    _agent, publisher = create_bus(8)
    channel = make_channel(fake, data_dir)
    task = asyncio.create_task(channel.start(publisher.inbound_sender()))
    await fake.wait_ready()
    return BareStart(channel, publisher, task)


async def test_stop_ends_start_and_a_second_stop_is_harmless(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    channel, publisher, task = await started_bare(fake_discord, tmp_path)

    await channel.stop()
    await channel.stop()

    async with asyncio.timeout(WAIT_S):
        await task
    assert task.exception() is None
    await fake_discord.wait_until(lambda: not fake_discord.live_sessions)
    # A stopped channel stays stopped: start returns at once.
    async with asyncio.timeout(WAIT_S):
        await channel.start(publisher.inbound_sender())
    assert fake_discord.identify_count == 1


async def test_cancelling_start_stops_within_a_second(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    channel, _publisher, task = await started_bare(fake_discord, tmp_path)
    await channel.wait_receiving()

    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=1.0)

    assert task in done
    assert task.cancelled()
    await fake_discord.wait_until(lambda: not fake_discord.live_sessions)


async def test_a_bad_token_is_fatal_and_marks_the_channel_down(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    _agent, publisher = create_bus(8)
    channel = make_channel(fake_discord, tmp_path, token="not-the-token")

    with pytest.raises(FatalChannelError, match="token"):
        async with asyncio.timeout(WAIT_S):
            await channel.start(publisher.inbound_sender())

    assert (await channel.health_check()).status is HealthStatus.DOWN
    assert [r.status for r in fake_discord.requests] == [401]


async def test_an_unreachable_api_is_a_transient_failure(tmp_path: Path) -> None:
    async with FakeDiscord() as fake:
        channel = make_channel(fake, tmp_path)
    # The fake has shut down: nothing listens on its port any more.
    _agent, publisher = create_bus(8)

    with pytest.raises(TransientError, match="cannot reach Discord"):
        async with asyncio.timeout(WAIT_S):
            await channel.start(publisher.inbound_sender())

    health = await channel.health_check()
    assert health.status is HealthStatus.DEGRADED


async def test_two_bots_in_one_process_talk_to_their_own_servers(tmp_path: Path) -> None:
    async with FakeDiscord(token="first") as first, FakeDiscord(token="second") as second:
        async with (
            run_bot(first, tmp_path / "one") as one,
            run_bot(second, tmp_path / "two") as two,
        ):
            await first.push_message(DM_CHANNEL, ALICE, "to the first")
            await second.push_message(DM_CHANNEL, ALICE, "to the second")
            assert (await one.next_inbound()).content == "to the first"
            assert (await two.next_inbound()).content == "to the second"
            await one.channel.send_typing(str(DM_CHANNEL))
        assert [r.path for r in first.requests].count(f"/channels/{DM_CHANNEL}/typing") == 1
        assert [r.path for r in second.requests].count(f"/channels/{DM_CHANNEL}/typing") == 0
    # discord.py's process-wide defaults were left alone.
    assert discord.http.Route.BASE == "https://discord.com/api/v10"


@pytest.mark.parametrize(("close_code", "hint"), [(4014, "MESSAGE CONTENT"), (4004, "token")])
async def test_a_gateway_that_refuses_the_identify_is_fatal(
    fake_discord: FakeDiscord, tmp_path: Path, close_code: int, hint: str
) -> None:
    fake_discord.gateway.identify_close_code = close_code
    _agent, publisher = create_bus(8)
    channel = make_channel(fake_discord, tmp_path)

    with pytest.raises(FatalChannelError) as raised:
        async with asyncio.timeout(WAIT_S):
            await channel.start(publisher.inbound_sender())

    assert hint in str(raised.value)
    assert (await channel.health_check()).status is HealthStatus.DOWN
