"""The Telegram channel under the real channel manager: retries, plain fallback, streaming."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bus import OutboundMessage, StreamSnapshot, create_bus
from channels.outbound.manager import ChannelManager
from channels.retry.pacing import RateLimits
from channels.telegram import TelegramChannel
from tests.channels.telegram.conftest import ChannelFactory
from tests.fakes.telegram_server import FakeTelegram

CHAT = 42


class RecordedSleeps:
    """The manager's sleep and clock: a sleep returns at once, moves the clock on and is
    remembered."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.now = 1000.0

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


@pytest.fixture
def sleeps() -> RecordedSleeps:
    return RecordedSleeps()


@pytest.fixture
async def channel(make_channel: ChannelFactory) -> AsyncIterator[TelegramChannel]:
    channel = make_channel()
    yield channel
    await channel.stop()


@pytest.fixture
def manager(channel: TelegramChannel, sleeps: RecordedSleeps) -> ChannelManager:
    _agent, publisher = create_bus()
    manager = ChannelManager(
        "p1", publisher, clock=sleeps.clock, sleep=sleeps, jitter=lambda delay_s: delay_s
    )
    # Holds only, no buckets: these tests are about what the manager sends, not how fast.
    manager.register(channel, edit_interval_s=0.01, rate_limits=RateLimits())
    return manager


def outbound(content: str, **fields: object) -> OutboundMessage:
    return OutboundMessage.model_validate(
        {"channel": "telegram", "chat_id": str(CHAT), "content": content, **fields}
    )


async def test_a_429_is_waited_out_and_the_reply_delivered_once(
    fake: FakeTelegram, manager: ChannelManager, sleeps: RecordedSleeps
) -> None:
    fake.fail_next("sendMessage", 429, "Too Many Requests: retry after 4", retry_after=4)
    await manager.deliver(outbound("**hello**"))

    assert 4.0 in sleeps.waits
    assert [call.status for call in fake.calls("sendMessage")] == [429, 200]
    [shown] = fake.bot_messages(CHAT)
    assert shown["text"] == "hello"
    assert shown["entities"][0]["type"] == "bold"


async def test_markup_telegram_refuses_is_sent_again_as_plain_text(
    fake: FakeTelegram, manager: ChannelManager
) -> None:
    fake.fail_next("sendMessage", 400, "Bad Request: can't parse entities: unexpected end")
    await manager.deliver(outbound("**hello** <world>"))

    first, second = fake.calls("sendMessage")
    assert first.params["parse_mode"] == "HTML"
    assert "parse_mode" not in second.params
    assert [m["text"] for m in fake.bot_messages(CHAT)] == ["**hello** <world>"]


async def test_a_streamed_reply_is_edited_in_place_without_a_duplicate_final(
    fake: FakeTelegram, manager: ChannelManager
) -> None:
    snapshots = ["Hel", "Hello **wor", "Hello **world**", "Hello **world**, and more"]
    for text in snapshots:
        await manager.deliver(StreamSnapshot(outbound(text, stream_id="s1")))
    await manager.deliver(outbound("Hello **world**, and more!", stream_id="s1"))

    [first] = fake.calls("sendMessage")
    assert first.params["text"] == "Hel"
    edits = fake.calls("editMessageText")
    assert edits
    assert all(edit.params["parse_mode"] == "HTML" for edit in edits)
    assert edits[-1].params["text"] == "Hello <b>world</b>, and more!"
    [shown] = fake.bot_messages(CHAT)
    assert shown["text"] == "Hello world, and more!"


async def test_a_long_stream_rolls_over_to_a_new_message_before_the_limit(
    fake: FakeTelegram, manager: ChannelManager
) -> None:
    paragraph = "流式回复的一段文字，带一个表情 😀。" * 20
    text = ""
    for _ in range(12):
        text += paragraph + "\n\n"
        await manager.deliver(StreamSnapshot(outbound(text, stream_id="s2")))
    await manager.deliver(outbound(text + "完。", stream_id="s2"))

    shown = fake.bot_messages(CHAT)
    assert len(shown) >= 2
    assert all(call.status == 200 for call in fake.calls("editMessageText"))
    assert "".join(m["text"] for m in shown).replace("\n", "") == (text + "完。").replace("\n", "")
