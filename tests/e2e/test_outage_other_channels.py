"""One platform down holds back none of the other channels of its profile, through the daemon.

A profile has Telegram and the HTTP API. Telegram goes down (its fake answers every call 500)
while replies to more of its chats are due than the channel manager delivers to at once (64 per
channel): every one of those deliveries is retried, for as long as the delivery deadline allows.
The API must go on answering all the while, and every Telegram reply must arrive, once, when
Telegram is back. Run twice: with the default bus, and with a bus that holds fewer Telegram
replies than are due (`bus.replies_per_channel`), so the turns of the other Telegram chats wait
to send theirs. And with Telegram down across a stop and a start: the replies still waiting are
journaled, the start is not held back by them, and each arrives once when Telegram is back.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from pathlib import Path
from urllib.parse import parse_qs

import aiohttp
import pytest

from tests.e2e.conftest import WAIT_S, running_daemon
from tests.fakes.held_agent import HeldEchoAgent
from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import DaemonProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="function")]

#: More chats than the channel manager delivers to at once on one channel.
TELEGRAM_CHATS = 70
#: The channel manager's deliveries at once per channel (`ChannelManager.max_active_chats`).
DELIVERING_AT_ONCE = 64
#: Patience for the retries' backoff (up to 30 s between attempts) once Telegram is back.
BACK_WAIT_S = 90.0
FIRST_CHAT = 50_000


def text_for(marker: str, number: int) -> str:
    return f"{marker} in chat {number}"


def chats_refused(telegram: FakeTelegram) -> int:
    """How many chats a refused sendMessage was for (its form-encoded body names the chat)."""
    return len(
        {
            parse_qs(attempt.body.decode()).get("chat_id", [""])[0]
            for attempt in telegram.outage.failed
            if attempt.path.endswith("/sendMessage")
        }
    )


def telegram_and_api(agent: HeldEchoAgent, telegram: FakeTelegram, api_port: int) -> str:
    return f"""\
agent: {{type: webhook, url: {agent.url}}}
channels:
  - type: telegram
    token: "{telegram.token}"
    base_url: {telegram.base_url}
    base_file_url: {telegram.base_file_url}
    poll_timeout_s: 5
    allow: ["*"]
  - type: api
    port: {api_port}
"""


async def api_answers(api_port: int, text: str) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{api_port}/v1/chat",
            json={"chat_id": "bob", "content": text},
            timeout=aiohttp.ClientTimeout(total=WAIT_S),
        ) as response,
    ):
        assert response.status == 200
        assert (await response.json())["reply"] == text


async def all_replies_shown(telegram: FakeTelegram, chats: list[int]) -> None:
    await telegram.wait_until(
        lambda: all(telegram.bot_messages(chat) for chat in chats), timeout_s=BACK_WAIT_S
    )


def assert_each_reply_shown_once(telegram: FakeTelegram, chats: list[int], marker: str) -> None:
    shown = {
        number: [str(message["text"]) for message in telegram.bot_messages(chat)]
        for number, chat in enumerate(chats)
    }
    assert shown == {number: [text_for(marker, number)] for number in range(len(chats))}


def telegram_turns_done(daemon: DaemonProcess) -> int:
    """Telegram turns whose reply is journaled: it has a place on the bus, or waits for one
    (the next thing the turn does, with nothing to wait for in between)."""
    return sum(
        1
        for event in daemon.logs
        if event.get("event") == "turn.done" and ":telegram:" in str(event.get("session"))
    )


@pytest.mark.parametrize("replies_per_channel", [None, 20], ids=["default-bus", "20-replies"])
async def test_a_platform_down_holds_back_no_other_channel_of_its_profile(
    tmp_path: Path, replies_per_channel: int | None
) -> None:
    marker = f"held{uuid.uuid4().hex[:8]}"
    api_port = free_port()
    async with HeldEchoAgent() as agent, FakeTelegram() as telegram:
        profile = telegram_and_api(agent, telegram, api_port)
        bus = (
            f"bus: {{replies_per_channel: {replies_per_channel}}}\n" if replies_per_channel else ""
        )
        # Telegram replies retried at once: as many as the manager's places, or the bus's.
        retried = min(DELIVERING_AT_ONCE, replies_per_channel or TELEGRAM_CHATS)
        async with running_daemon(tmp_path, {"both": profile}, gateway_settings=bus) as daemon:
            await telegram.wait_until(lambda: telegram.long_polls_waiting > 0, timeout_s=WAIT_S)
            hold = agent.hold(marker)
            chats = [FIRST_CHAT + number for number in range(TELEGRAM_CHATS)]
            for number, chat in enumerate(chats):
                telegram.push_message(chat, text_for(marker, number), user_id=chat)
            await asyncio.wait_for(hold.reached.wait(), WAIT_S)

            async with telegram.outage.down():
                hold.release.set()
                # Every place Telegram has holds a reply it keeps retrying.
                await telegram.outage.wait_until(
                    lambda: chats_refused(telegram) >= retried, BACK_WAIT_S
                )
                await api_answers(api_port, "still there?")
                if replies_per_channel:
                    # Past its places, Telegram's replies wait in the bus, not at the platform.
                    await daemon.wait_log(
                        lambda _event: telegram_turns_done(daemon) == TELEGRAM_CHATS
                    )
                    waiting = await daemon.metric("octos_replies_waiting", channel="telegram")
                    assert waiting == TELEGRAM_CHATS - replies_per_channel
                    status, body = await daemon.get("/status.json")
                    assert status == 200, body
                    [shown] = json.loads(body)["profiles"]
                    assert shown["replies_waiting"]["telegram"] == waiting

            await all_replies_shown(telegram, chats)
            assert await daemon.stop_cleanly() == 0
        assert_each_reply_shown_once(telegram, chats, marker)


async def test_replies_waiting_for_a_place_at_a_stop_are_sent_after_the_restart(
    tmp_path: Path,
) -> None:
    # Telegram stays down across a stop and a start, with more replies due than its places:
    # the start is not held back by them (the API answers), and once Telegram is back every
    # reply arrives once.
    marker = f"held{uuid.uuid4().hex[:8]}"
    chats = [FIRST_CHAT + number for number in range(30)]
    api_port = free_port()
    bus = "bus: {replies_per_channel: 5}\n"
    async with HeldEchoAgent() as agent, FakeTelegram() as telegram:
        profiles = {"both": telegram_and_api(agent, telegram, api_port)}
        async with running_daemon(tmp_path, profiles, grace_s=2, gateway_settings=bus) as daemon:
            await telegram.wait_until(lambda: telegram.long_polls_waiting > 0, timeout_s=WAIT_S)
            hold = agent.hold(marker)
            for number, chat in enumerate(chats):
                telegram.push_message(chat, text_for(marker, number), user_id=chat)
            await asyncio.wait_for(hold.reached.wait(), WAIT_S)
            async with telegram.outage.down():
                hold.release.set()
                await daemon.wait_log(lambda _event: telegram_turns_done(daemon) == len(chats))
                assert await daemon.metric("octos_replies_waiting", channel="telegram") == 25
                # The shutdown grace ends the deliveries still being retried; all 30 replies
                # are journaled.
                daemon.signal(signal.SIGTERM)
                await daemon.wait(WAIT_S)

        async with running_daemon(tmp_path, profiles, grace_s=2, gateway_settings=bus) as daemon:
            async with telegram.outage.down():
                await daemon.wait_log(lambda e: e.get("event") == "dispatcher.resumed")
                await api_answers(api_port, "back already?")
                waiting = await daemon.metric("octos_replies_waiting", channel="telegram")
                assert waiting == 25

            await all_replies_shown(telegram, chats)
            assert await daemon.stop_cleanly() == 0
        assert_each_reply_shown_once(telegram, chats, marker)
