"""Replies out through the channel manager: splitting, rate limits, errors, streaming, files."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bus import ANSWERS, OutboundMessage, StreamSnapshot
from channels.errors import ChannelError, DeliveryError, RateLimited
from channels.retry import Reason
from channels.slack import SlackChannel
from channels.split import split_message
from tests.channels.conftest import FakeClock, ManagerFactory
from tests.channels.slack.conftest import GENERAL, make_channel
from tests.fakes.slack_server import FakeSlack

ANCHOR = "1700000000.000100"


@pytest.fixture
async def fake_slack(clock: FakeClock) -> AsyncIterator[FakeSlack]:
    """The fake timestamps requests with the manager's clock, so edit spacing is exact."""
    async with FakeSlack(clock=clock) as fake:
        yield fake


@pytest.fixture
def channel(fake_slack: FakeSlack, tmp_path: Path) -> SlackChannel:
    # Sending needs no running receiver: only the Web API.
    return make_channel(fake_slack, tmp_path)


def reply(content: str, **fields: object) -> OutboundMessage:
    return OutboundMessage(
        channel="slack",
        chat_id=GENERAL,
        content=content,
        reply_to=ANCHOR,
        metadata={ANSWERS: [ANCHOR]},
        **fields,
    )


def cjk_and_emoji_text(length: int) -> str:
    """Paragraphs of Chinese prose with emoji (flags, ZWJ families), a code block in the middle."""
    sentence = "这是一个关于网关的长句子，用来测试分割😀👨‍👩‍👧‍👦🇨🇳。"
    paragraphs: list[str] = []
    while sum(map(len, paragraphs)) < length:
        paragraphs.append(sentence * 7)
        if len(paragraphs) == 9:
            code = "\n".join(f"代码行 {n} 🚀 <x>" for n in range(60))
            paragraphs.append(f"```\n{code}\n```")
    text = "\n\n".join(paragraphs)[:length]
    return text[: text.rindex("。") + 1]


def visible(text: str) -> str:
    """What a reader sees, whatever the breaks: no whitespace, no fence markers."""
    return re.sub(r"\s+|```", "", text)


async def test_a_long_cjk_and_emoji_reply_arrives_in_chunks_within_the_limit(
    channel: SlackChannel, fake_slack: FakeSlack, managing: ManagerFactory
) -> None:
    text = cjk_and_emoji_text(10_000)
    assert len(text) >= 9_900
    # Split raw, the pieces fit; escaping (`<x>` in the code) can grow one past the limit
    # after rendering, and the manager splits that one again.
    pieces = split_message(text, channel.limit)
    assert all(len(piece) <= 4000 for piece in pieces)

    manager = managing(channel)
    await manager.deliver(reply(text))

    posts = [call.params["text"] for call in fake_slack.calls("chat.postMessage")]
    assert len(posts) >= 3
    assert all(len(post) <= 4000 for post in posts)
    # Each chunk ends at a natural break (a sentence or a closed code block), fences balanced.
    assert all(post.endswith(("。", "```")) for post in posts)
    assert all(post.count("```") % 2 == 0 for post in posts)
    assert visible("".join(posts)) == visible(channel.format_outbound(text))
    threads = {message.get("thread_ts") for message in fake_slack.bot_messages(GENERAL)}
    assert threads == {ANCHOR}


async def test_a_rate_limited_post_waits_retry_after_and_is_delivered_once(
    channel: SlackChannel,
    fake_slack: FakeSlack,
    managing: ManagerFactory,
    clock: FakeClock,
) -> None:
    fake_slack.rate_limit_next("chat.postMessage", retry_after_s=7)
    manager = managing(channel)

    await manager.deliver(reply("hello"))

    assert [call.status for call in fake_slack.calls("chat.postMessage")] == [429, 200]
    assert clock.sleeps == [7.0]
    assert [m["text"] for m in fake_slack.bot_messages(GENERAL)] == ["hello"]


async def test_the_sdk_itself_does_not_retry_a_rate_limit(
    channel: SlackChannel, fake_slack: FakeSlack
) -> None:
    fake_slack.rate_limit_next("chat.postMessage", retry_after_s=3)

    with pytest.raises(RateLimited) as raised:
        await channel.send(reply("hello"))

    assert raised.value.retry_after_s == 3.0
    assert len(fake_slack.calls("chat.postMessage")) == 1
    assert fake_slack.bot_messages(GENERAL) == []


async def test_a_server_error_is_retried_after_a_backoff(
    channel: SlackChannel,
    fake_slack: FakeSlack,
    managing: ManagerFactory,
    clock: FakeClock,
) -> None:
    fake_slack.server_error_next("chat.postMessage", status=503)
    fake_slack.fail_next("chat.postMessage", "internal_error")
    manager = managing(channel)

    await manager.deliver(reply("hello"))

    assert [call.status for call in fake_slack.calls("chat.postMessage")] == [503, 200, 200]
    assert clock.sleeps == [1.0, 2.0]
    assert len(fake_slack.bot_messages(GENERAL)) == 1


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("msg_too_long", Reason.TOO_LONG),
        ("invalid_auth", Reason.AUTH),
        ("not_in_channel", Reason.UNKNOWN),
    ],
)
async def test_refusals_are_not_retried(
    channel: SlackChannel,
    fake_slack: FakeSlack,
    managing: ManagerFactory,
    error: str,
    reason: str,
) -> None:
    fake_slack.fail_next("chat.postMessage", error)
    manager = managing(channel)

    with pytest.raises(DeliveryError) as raised:
        await manager.deliver(reply("hello"))

    assert raised.value.reason == reason
    assert len(fake_slack.calls("chat.postMessage")) == 1


async def test_editing_a_message_that_is_gone_is_a_channel_error(channel: SlackChannel) -> None:
    with pytest.raises(ChannelError, match="message_not_found"):
        await channel.edit_message(GENERAL, "1700000000.999999", "new text")


async def test_a_stream_is_edited_no_faster_than_the_interval_and_ends_without_a_duplicate(
    channel: SlackChannel,
    fake_slack: FakeSlack,
    make_manager: ManagerFactory,
    clock: FakeClock,
) -> None:
    manager = make_manager()
    manager.register(channel, edit_interval_s=1.0)
    words = [f"word{n}" for n in range(40)]
    for end in range(1, len(words) + 1):
        await manager.deliver(StreamSnapshot(reply(" ".join(words[:end]), stream_id="s1")))
        clock.advance(0.25)
        await manager.streams.flush_due()
    await manager.deliver(reply(" ".join(words) + " **done**", stream_id="s1"))

    [post] = fake_slack.calls("chat.postMessage")
    updates = fake_slack.calls("chat.update")
    assert len(updates) >= 8
    times = [post.at, *(update.at for update in updates)]
    assert all(later - earlier >= 1.0 for earlier, later in itertools.pairwise(times))
    [message] = fake_slack.bot_messages(GENERAL)
    assert message["text"] == " ".join(words) + " *done*"
    assert message["thread_ts"] == ANCHOR


async def test_a_stream_rolls_over_to_a_new_message_before_the_limit(
    channel: SlackChannel,
    fake_slack: FakeSlack,
    managing: ManagerFactory,
    clock: FakeClock,
) -> None:
    manager = managing(channel)
    sentences = [f"Sentence number {n} of a long streamed reply & more." for n in range(220)]
    text = " ".join(sentences)
    for end in range(10, len(sentences) + 1, 10):
        await manager.deliver(StreamSnapshot(reply(" ".join(sentences[:end]), stream_id="s2")))
        clock.advance(1.0)
    await manager.deliver(reply(text, stream_id="s2"))

    messages = fake_slack.bot_messages(GENERAL)
    assert len(messages) >= 3
    assert all(len(message["text"]) <= 4000 for message in messages)
    assert all(message["thread_ts"] == ANCHOR for message in messages)
    # Every part shown exactly once: a duplicate final would repeat the tail.
    assert visible(" ".join(m["text"] for m in messages)) == visible(channel.format_outbound(text))


async def test_media_is_uploaded_into_the_thread_with_its_caption(
    channel: SlackChannel,
    fake_slack: FakeSlack,
    managing: ManagerFactory,
    tmp_path: Path,
) -> None:
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"\x89PNG fake image")
    manager = managing(channel)

    await manager.deliver(reply("**the** chart", media=[str(chart)]))

    assert [r.method for r in fake_slack.requests] == [
        "files.getUploadURLExternal",
        "files.completeUploadExternal",
    ]
    [stored] = fake_slack.files.values()
    assert (stored["name"], stored["data"]) == ("chart.png", b"\x89PNG fake image")
    [message] = fake_slack.bot_messages(GENERAL)
    assert message["text"] == "*the* chart"
    assert message["thread_ts"] == ANCHOR
    assert [f["id"] for f in message["files"]] == [stored["id"]]


async def test_a_missing_media_file_is_a_channel_error(channel: SlackChannel) -> None:
    with pytest.raises(ChannelError, match="cannot read media file"):
        await channel.send(reply("see", media=["/nonexistent/file.png"]))


async def test_delete_removes_the_bots_message(
    channel: SlackChannel, fake_slack: FakeSlack
) -> None:
    ts = await channel.send_with_id(reply("oops"))
    assert ts is not None

    await channel.delete_message(GENERAL, ts)

    assert fake_slack.bot_messages(GENERAL) == []
    assert fake_slack.calls("chat.delete")[0].params == {"channel": GENERAL, "ts": ts}
