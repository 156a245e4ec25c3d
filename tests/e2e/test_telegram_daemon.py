"""Telegram end to end: the daemon subprocess, python-telegram-bot, and the fake Bot API."""

from __future__ import annotations

import itertools
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
from tests.e2e.long_text import CODE_LINES, assert_split_well, mixed_text
from tests.fakes.telegram_server import TEXT_LIMIT, FakeTelegram, RecordedRequest, utf16_len
from tests.support.daemon import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ALICE, BOB, MALLORY = 4201, 4202, 6666


def telegram_profile(fake: FakeTelegram, *, delay_s: float = 0.3, pieces: int = 8) -> str:
    # Alice is allowed by her id, Bob by his username.
    channel = f"""\
  - type: telegram
    token: "{fake.token}"
    base_url: {fake.base_url}
    base_file_url: {fake.base_file_url}
    poll_timeout_s: 5
    edit_interval_s: {EDIT_INTERVAL_S}
    allow: [{ALICE}, "@bob"]
"""
    return echo_profile(channel, delay_s=delay_s, pieces=pieces)


def texts(fake: FakeTelegram, chat: int) -> list[str]:
    return [str(message["text"]) for message in fake.bot_messages(chat)]


def sent_to(chat: int, request: RecordedRequest) -> bool:
    return str(request.params.get("chat_id")) == str(chat)


def utf16_slice(text: str, offset: int, length: int) -> str:
    encoded = text.encode("utf-16-le")
    return encoded[2 * offset : 2 * (offset + length)].decode("utf-16-le")


def preformatted(message: dict[str, Any]) -> str:
    """The text of a message's `pre` entities: what Telegram shows as a code block."""
    text = str(message["text"])
    return "\n".join(
        utf16_slice(text, entity["offset"], entity["length"])
        for entity in message.get("entities", [])
        if entity["type"] == "pre"
    )


@dataclass
class TelegramBot(EchoBot[int]):
    fake: FakeTelegram
    daemon: DaemonProcess
    chats: itertools.count[int] = field(default_factory=lambda: itertools.count(10_001))

    def new_chat(self) -> int:
        return next(self.chats)

    async def say(self, chat: int, text: str) -> dict[str, Any]:
        return self.fake.push_message(chat, text, user_id=ALICE, username="alice")

    def shown(self, chat: int) -> list[str]:
        return texts(self.fake, chat)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        await self.fake.wait_until(condition, timeout_s=WAIT_S)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TelegramBot]:
    directory = tmp_path_factory.mktemp("telegram")
    async with (
        FakeTelegram() as fake,
        running_daemon(directory, {"main": telegram_profile(fake)}) as daemon,
    ):
        await fake.wait_until(lambda: fake.long_polls_waiting > 0, timeout_s=WAIT_S)
        yield TelegramBot(fake, daemon)


async def test_allowed_users_get_the_echo_a_stranger_one_notice_and_sigterm_confirms(
    tmp_path: Path,
) -> None:
    async with (
        FakeTelegram() as fake,
        running_daemon(tmp_path, {"main": telegram_profile(fake, delay_s=0.05, pieces=2)}) as d,
    ):
        await fake.wait_until(lambda: fake.long_polls_waiting > 0, timeout_s=WAIT_S)
        # The stranger writes first: once Alice is answered, both were dispatched.
        fake.push_message(MALLORY, "let me in", user_id=MALLORY, username="mallory")
        fake.push_message(MALLORY, "please?", user_id=MALLORY, username="mallory")
        from_alice = fake.push_message(ALICE, "hello from alice", user_id=ALICE, username="alice")
        fake.push_message(BOB, "hello from bob", user_id=BOB, username="bob")
        await fake.wait_until(
            lambda: (
                texts(fake, ALICE) == ["hello from alice"]
                and texts(fake, BOB) == ["hello from bob"]
            ),
            timeout_s=WAIT_S,
        )
        refused = await d.metric(
            "octos_messages_in_total", profile="main", channel="telegram", outcome="refused"
        )
        assert refused == 2
        assert await d.stop_cleanly() == 0

    # Shutdown delivers everything in hand, so what the fake holds now is complete.
    [reply] = fake.bot_messages(ALICE)
    assert reply["reply_to_message"]["message_id"] == from_alice["message_id"]
    [notice] = texts(fake, MALLORY)
    assert str(MALLORY) in notice
    # The agent's turns show "typing"; nothing of the kind happened in the stranger's chat.
    typing = fake.calls("sendChatAction")
    assert [call for call in typing if sent_to(ALICE, call)]
    assert not [call for call in typing if sent_to(MALLORY, call)]
    keys = session_keys(tmp_path / "data")
    assert f"main:telegram:{ALICE}" in keys
    assert not [key for key in keys if f":{MALLORY}" in key], keys
    # Every update was handled once, and the offset confirmed before the daemon exited.
    assert fake.pending_update_ids == []
    assert set(fake.delivered.values()) == {1}
    assert d.logs[-1]["event"] == "daemon.stopped"


async def test_a_long_mixed_reply_arrives_in_natural_chunks_within_the_limit(
    bot: TelegramBot,
) -> None:
    fake, chat, text = bot.fake, bot.new_chat(), mixed_text()
    await bot.say(chat, text)
    await bot.barrier(chat)

    *chunks, _barrier = fake.bot_messages(chat)
    shown = [str(message["text"]) for message in chunks]
    assert all(utf16_len(chunk) <= TEXT_LIMIT for chunk in shown)
    assert_split_well(text, shown, fences_shown=False)
    # Telegram shows no fences: the code must be inside `pre` entities, every line of it.
    code_lines = {line.strip() for snippet in CODE_LINES for line in snippet.split("\n")}
    shown_code = [
        (line, preformatted(message))
        for message in chunks
        for line in str(message["text"]).split("\n")
        if line.strip() in code_lines
    ]
    assert len(shown_code) == len(code_lines)
    outside = [line for line, block in shown_code if line not in block]
    assert not outside, f"code outside a code block: {outside}"
    # Shown as a stream that rolled over while it grew: a message opened for the rest was
    # edited too, and no request was refused as too long.
    calls = fake.calls("sendMessage") + fake.calls("editMessageText")
    mine = [call for call in calls if sent_to(chat, call)]
    assert [call.status for call in mine] == [200] * len(mine)
    edited = {call.params["message_id"] for call in mine if call.method == "editMessageText"}
    assert len(edited) >= 2


async def test_a_streamed_reply_is_edited_at_the_configured_rate_without_a_duplicate(
    bot: TelegramBot,
) -> None:
    fake, chat = bot.fake, bot.new_chat()
    text = await bot.streamed_reply_delivered(chat)

    reply, _barrier = fake.bot_messages(chat)
    assert reply["text"] == text
    sent = next(call for call in fake.calls("sendMessage") if sent_to(chat, call))
    edits = [call for call in fake.calls("editMessageText") if of_message(call, reply)]
    assert edits, "a slow reply is shown growing"
    shown = [sent, *edits]
    assert [call.status for call in shown] == [200] * len(shown)
    assert_edited_at_the_interval(
        [call.at for call in shown], [str(call.params["text"]) for call in shown]
    )


async def test_a_429_is_waited_out_and_the_reply_delivered_once(bot: TelegramBot) -> None:
    fake, chat = bot.fake, bot.new_chat()
    before = await bot.daemon.rate_limited_retries("telegram")
    fake.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
    await bot.say(chat, "patience, please")
    await bot.barrier(chat)

    assert texts(fake, chat)[0] == "patience, please"
    sends = [call.status for call in fake.calls("sendMessage") if sent_to(chat, call)]
    assert sends == [429, 200, 200]  # the reply, refused once, then the barrier's reply
    assert await bot.daemon.rate_limited_retries("telegram") > before


async def test_a_dropped_long_poll_reconnects_and_answers_once(bot: TelegramBot) -> None:
    fake, chat = bot.fake, bot.new_chat()
    await fake.wait_until(lambda: fake.long_polls_waiting > 0, timeout_s=WAIT_S)
    failures = bot.daemon.count_logged("telegram.poll_failed")
    assert fake.drop_connections() >= 1
    message = await bot.say(chat, "are you still there")
    await bot.daemon.wait_logged("telegram.poll_failed", more_than=failures)
    await bot.reply_shown(chat, "are you still there")
    # Telegram sends the same message again, in a new update.
    fake.push_update({"message": message})
    await bot.barrier(chat)

    assert texts(fake, chat)[0] == "are you still there"
    assert len(texts(fake, chat)) == 2
    assert (
        await bot.daemon.metric("octos_messages_in_total", channel="telegram", outcome="duplicate")
        >= 1
    )


async def test_malformed_updates_are_logged_and_skipped(bot: TelegramBot) -> None:
    fake, chat = bot.fake, bot.new_chat()
    skipped = bot.daemon.count_logged("telegram.malformed_update_skipped")
    fake.push_raw_update("this is not an update")
    broken = fake.push_raw_update({"message": {"message_id": "seven", "chat": "nowhere"}})
    await bot.say(chat, "still answering?")
    await bot.reply_shown(chat, "still answering?")

    assert bot.daemon.count_logged("telegram.malformed_update_skipped") == skipped + 2
    # The offset moved past the broken update: Telegram will not send it again.
    await fake.wait_until(lambda: broken not in fake.pending_update_ids, timeout_s=WAIT_S)


def of_message(call: RecordedRequest, message: dict[str, Any]) -> bool:
    return str(call.params.get("message_id")) == str(message["message_id"]) and sent_to(
        message["chat"]["id"], call
    )


async def test_a_reply_streaming_when_sigkilled_is_finished_in_its_message(
    tmp_path: Path,
) -> None:
    async with FakeTelegram() as fake:

        async def polling(daemon: DaemonProcess) -> None:
            await daemon.wait_log(logged("telegram.connected"))

        await assert_a_stream_cut_by_sigkill_is_finished_in_place(
            tmp_path,
            lambda delay_s, pieces: telegram_profile(fake, delay_s=delay_s, pieces=pieces),
            lambda daemon: TelegramBot(fake, daemon),
            10_901,
            ready=polling,
        )
