"""Matrix end to end: the daemon subprocess, matrix-nio, and the fake homeserver."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from channels.matrix import ENCRYPTED_NOTICE
from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged, running_daemon, session_keys
from tests.e2e.echo_bot import (
    STREAMED_TEXT,
    EchoBot,
    assert_a_stream_cut_by_sigkill_is_finished_in_place,
    echo_profile,
)
from tests.e2e.long_text import assert_split_well, mixed_text
from tests.fakes.matrix_server import MAX_EVENT_BYTES, SERVER, FakeMatrix
from tests.support.daemon import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ALICE = f"@alice:{SERVER}"
MALLORY = f"@mallory:{SERVER}"


def matrix_profile(
    fake: FakeMatrix, *, delay_s: float = 0.05, pieces: int = 2, token: str | None = None
) -> str:
    channel = f"""\
  - type: matrix
    homeserver: {fake.homeserver}
    user_id: "{fake.bot_user_id}"
    access_token: "{token or fake.access_token}"
    edit_interval_s: 1.0
    allow: ["{ALICE}"]
"""
    return echo_profile(channel, delay_s=delay_s, pieces=pieces)


@dataclass
class MatrixBot(EchoBot[str]):
    fake: FakeMatrix
    daemon: DaemonProcess

    async def say(self, room: str, text: str) -> str:
        return self.fake.say(room, ALICE, text)

    def shown(self, room: str) -> list[str]:
        return self.fake.shown(room)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        await self.fake.wait_until(condition, WAIT_S)

    async def barrier(self, room: str) -> None:
        marker = f"barrier {len(self.fake.calls)}"
        self.fake.say(room, ALICE, marker)
        await self.fake.wait_until(lambda: self.fake.shown(room)[-1:] == [marker], WAIT_S)


async def syncing(fake: FakeMatrix, daemon: DaemonProcess) -> None:
    await daemon.wait_log(logged("matrix.receiving"))
    await fake.wait_until(lambda: fake.long_polls_waiting > 0, WAIT_S)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MatrixBot]:
    directory = tmp_path_factory.mktemp("matrix")
    async with FakeMatrix() as fake:
        profiles = {"main": matrix_profile(fake, delay_s=0.3, pieces=8)}
        async with running_daemon(directory, profiles) as daemon:
            await syncing(fake, daemon)
            yield MatrixBot(fake, daemon)


async def test_an_allowed_user_gets_the_echo_a_stranger_one_notice_and_sigterm_exits_0(
    tmp_path: Path,
) -> None:
    async with FakeMatrix() as fake, running_daemon(tmp_path, {"main": matrix_profile(fake)}) as d:
        await syncing(fake, d)
        stranger_room = fake.create_room([MALLORY])
        for text in ("let me in", "please?"):
            fake.say(stranger_room, MALLORY, text)
        room = fake.create_room([ALICE])
        fake.say(room, ALICE, "hello from alice")
        await fake.wait_until(lambda: fake.shown(room) == ["hello from alice"], WAIT_S)
        refused = await d.metric(
            "octos_messages_in_total", profile="main", channel="matrix", outcome="refused"
        )
        assert refused == 2
        assert await d.stop_cleanly() == 0

    assert (room, True) in fake.typing  # "typing" showed while the turn ran
    [notice] = fake.shown(stranger_room)
    assert MALLORY in notice
    keys = session_keys(tmp_path / "data")
    assert f"main:matrix:{room}" in keys
    assert not [key for key in keys if stranger_room in key], keys


async def test_a_long_mixed_reply_arrives_complete_with_every_event_within_the_limit(
    bot: MatrixBot,
) -> None:
    fake, room, text = bot.fake, bot.fake.create_room([ALICE]), mixed_text()
    fake.say(room, ALICE, text)
    await bot.barrier(room)
    # 10,000 characters of CJK, emoji and code take about 40 KB as body plus HTML: one event.
    reply, _barrier = fake.shown(room)
    assert reply == text
    html = [e["content"].get("m.new_content", e["content"]) for e in fake.bot_events(room)]
    assert any('<pre><code class="language-python">' in c.get("formatted_body", "") for c in html)
    assert_within_limit(fake)


async def test_a_longer_reply_is_split_in_natural_parts_within_the_event_limit(
    bot: MatrixBot,
) -> None:
    fake, room, text = bot.fake, bot.fake.create_room([ALICE]), mixed_text(40_000)
    fake.say(room, ALICE, text)
    await bot.barrier(room)
    *chunks, _barrier = fake.shown(room)
    assert_split_well(text, chunks, fences_shown=True)
    assert_within_limit(fake)


def assert_within_limit(fake: FakeMatrix) -> None:
    """Every event the bot sent (messages and edits) fit the spec's 65,536 bytes; none was
    refused as too large."""
    assert max(fake.event_sizes) <= MAX_EVENT_BYTES
    assert not [c for c in fake.calls_to("PUT", "/send/") if c.status == 413]


async def test_a_streamed_reply_is_edited_in_place_without_a_duplicate(bot: MatrixBot) -> None:
    fake, room = bot.fake, bot.fake.create_room([ALICE])
    text = STREAMED_TEXT
    fake.say(room, ALICE, text)
    await bot.barrier(room)
    reply, _barrier = fake.shown(room)
    assert reply == text
    edits = [e for e in fake.bot_events(room) if "m.relates_to" in e["content"]]
    assert edits, "a slow reply is shown growing"
    assert all(e["content"]["body"].startswith("* ") for e in edits)


async def test_a_rate_limited_send_is_waited_out_and_delivered_once(bot: MatrixBot) -> None:
    fake, room = bot.fake, bot.fake.create_room([ALICE])
    before = await bot.daemon.rate_limited_retries("matrix")
    fake.rate_limit_next("send", retry_after_ms=800)
    fake.say(room, ALICE, "patience")
    await bot.barrier(room)
    assert fake.shown(room)[0] == "patience"
    assert fake.shown(room).count("patience") == 1
    assert await bot.daemon.rate_limited_retries("matrix") > before


async def test_an_encrypted_room_gets_a_clear_notice(bot: MatrixBot) -> None:
    fake = bot.fake
    room = fake.create_room([ALICE], encrypted=True)
    fake.say_encrypted(room, ALICE)
    await fake.wait_until(lambda: fake.shown(room) == [ENCRYPTED_NOTICE], WAIT_S)
    await bot.daemon.wait_log(logged("matrix.encrypted_room"))


async def test_a_wrong_token_marks_matrix_down_and_the_other_profile_keeps_answering(
    tmp_path: Path,
) -> None:
    async with FakeMatrix() as fake:
        profiles = {"good": matrix_profile(fake), "bad": matrix_profile(fake, token="revoked")}
        async with running_daemon(tmp_path, profiles) as daemon:
            await daemon.wait_log(logged("channel.down"))
            await syncing(fake, daemon)
            status, body = await daemon.get("/readyz")
            assert status == 503
            assert '"status": "down"' in body
            assert "access_token" in body
            room = fake.create_room([ALICE])
            fake.say(room, ALICE, "still there?")
            await fake.wait_until(lambda: fake.shown(room) == ["still there?"], WAIT_S)


async def test_an_acknowledged_message_survives_sigkill_and_is_answered_once(
    tmp_path: Path,
) -> None:
    async with FakeMatrix() as fake:
        profile = matrix_profile(fake, delay_s=5.0, pieces=2)
        async with running_daemon(tmp_path, {"main": profile}) as first:
            await syncing(fake, first)
            room = fake.create_room([ALICE])
            fake.say(room, ALICE, "do not lose me")
            # Acknowledged: the since token moved past the message (it was durable).
            await first.wait_log(logged("matrix.since_advanced"))
            first.signal(signal.SIGKILL)
            await first.wait(WAIT_S)
        # At most the streamed first half of the reply made it out before the kill.
        assert all("do not lose me".startswith(text) for text in fake.shown(room))
        restarted = DaemonProcess(tmp_path / "gateway.yaml", env=DAEMON_ENV)
        try:
            await restarted.start()
            await syncing(fake, restarted)
            fake.say(room, ALICE, "and me")
            await fake.wait_until(lambda: "and me" in fake.shown(room), WAIT_S)
            assert await restarted.stop_cleanly() == 0
        finally:
            await restarted.stop()
        shown = fake.shown(room)
        assert shown[-2:] == ["do not lose me", "and me"]
        assert len(shown) <= 3
        assert all("do not lose me".startswith(text) for text in shown[:-2])


async def test_a_reply_streaming_when_sigkilled_is_finished_in_its_message(
    tmp_path: Path,
) -> None:
    async with FakeMatrix() as fake:
        room = fake.create_room([ALICE])
        await assert_a_stream_cut_by_sigkill_is_finished_in_place(
            tmp_path,
            lambda delay_s, pieces: matrix_profile(fake, delay_s=delay_s, pieces=pieces),
            lambda daemon: MatrixBot(fake, daemon),
            room,
            ready=lambda daemon: syncing(fake, daemon),
        )
