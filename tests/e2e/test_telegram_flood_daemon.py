"""Telegram's flood limits through the daemon: replies are paced before the fake refuses, and a
refusal holds its chat for the whole `retry_after` while the other chats go on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import WAIT_S, running_daemon
from tests.fakes.telegram_server import FakeTelegram, FloodControl, RecordedRequest

pytestmark = pytest.mark.slow

FIRST_CHAT = 20_001


def flood_profile(fake: FakeTelegram) -> str:
    """The echo agent (one piece, so a reply is one message) behind Telegram, everyone allowed."""
    return f"""\
queue_mode: followup
agent: {{type: echo, pieces: 1}}
channels:
  - type: telegram
    token: "{fake.token}"
    base_url: {fake.base_url}
    base_file_url: {fake.base_file_url}
    poll_timeout_s: 2
    allow: ["*"]
"""


def to_chat(chat: int) -> Callable[[RecordedRequest], bool]:
    def sent_to(request: RecordedRequest) -> bool:
        return request.method != "getUpdates" and str(request.params.get("chat_id")) == str(chat)

    return sent_to


def answered(fake: FakeTelegram, chats: range) -> bool:
    return all(fake.bot_messages(chat) for chat in chats)


async def test_a_burst_to_100_chats_gets_no_429(tmp_path: Path) -> None:
    flood = FloodControl()
    chats = range(FIRST_CHAT, FIRST_CHAT + 100)
    async with (
        FakeTelegram(flood=flood) as fake,
        running_daemon(tmp_path, {"flood": flood_profile(fake)}),
    ):
        await fake.wait_for_calls("getUpdates")
        for chat in chats:
            fake.push_message(chat, f"hello from {chat}", user_id=chat, username=None)
        await fake.wait_until(lambda: answered(fake, chats), timeout_s=WAIT_S)
        assert flood.refusals == []
        assert [str(m["text"]) for m in fake.bot_messages(chats[-1])] == [f"hello from {chats[-1]}"]


async def test_a_429_holds_its_chat_for_the_whole_retry_after_while_others_go_on(
    tmp_path: Path,
) -> None:
    flood = FloodControl()
    held, others = FIRST_CHAT, range(FIRST_CHAT + 1, FIRST_CHAT + 6)
    flood.refuse_next(str(held), 7)
    async with (
        FakeTelegram(flood=flood) as fake,
        running_daemon(tmp_path, {"flood": flood_profile(fake)}),
    ):
        await fake.wait_for_calls("getUpdates")
        fake.push_message(held, "held back", user_id=held, username=None)
        [refused] = await fake.wait_for_calls(
            "sendMessage", where=lambda r: to_chat(held)(r) and r.status == 429, timeout_s=WAIT_S
        )
        for chat in others:
            fake.push_message(chat, f"going on in {chat}", user_id=chat, username=None)
        await fake.wait_until(lambda: answered(fake, range(held, others.stop)), timeout_s=WAIT_S)

        after = [r for r in fake.requests if to_chat(held)(r) and r.at > refused.at]
        messages = [r for r in after if r.method != "sendChatAction"]
        # No message reached the held chat before the 7 s passed, and the first one after them
        # delivered the reply.
        assert messages[0].at - refused.at >= 7
        assert (messages[0].method, messages[0].status) == ("sendMessage", 200)
        assert all(r.status == 200 for r in messages)
        # Nor did its typing indicator go on asking: at most the one that was on its way when
        # the refusal came.
        assert len([r for r in after if r.at < messages[0].at]) <= 1
        # The other chats were answered meanwhile.
        for chat in others:
            [reply] = [r for r in fake.calls("sendMessage") if to_chat(chat)(r)]
            assert reply.at < messages[0].at
        assert [str(m["text"]) for m in fake.bot_messages(held)] == ["held back"]
