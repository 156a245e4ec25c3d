"""Sending through the real python-telegram-bot to the fake Bot API, errors translated."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from bus import ANSWERS, OutboundMessage
from channels.base import FORMATTED
from channels.errors import (
    AuthError,
    ChannelError,
    FormattingRejected,
    MessageNotModified,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.outbound.delivery import fit_chunks
from channels.registry import ChannelContext, build_channel
from channels.split.limits import utf16_units
from channels.telegram import TelegramChannel
from tests.channels.telegram.conftest import ChannelFactory, config_for, running
from tests.fakes.telegram_server import FakeTelegram, parse_html

CHAT = 42


def reply(channel: TelegramChannel, markdown: str, **fields: Any) -> OutboundMessage:
    """An outbound message as the manager sends it: formatted, flagged as such."""
    return OutboundMessage(
        channel="telegram",
        chat_id=str(CHAT),
        content=channel.format_outbound(markdown),
        metadata={FORMATTED: True},
        **fields,
    )


async def test_every_part_of_a_reply_goes_to_the_forum_topic_it_was_asked_in(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    forum, topic = -1001234, 7
    async with running(make_channel(require_mention=False), fake) as run:
        fake.push_message(forum, "long question", chat_type="supergroup", topic=topic)
        question = (await run.next_inbound()).message_id
        assert question is not None
        first = OutboundMessage(
            channel="telegram",
            chat_id=str(forum),
            content="part one",
            reply_to=question,
            metadata={ANSWERS: [question]},
        )
        later = first.model_copy(update={"content": "part two", "reply_to": None})
        await run.channel.send(first)
        await run.channel.send(later)
    sent = fake.bot_messages(forum)
    assert [(m["text"], m.get("message_thread_id")) for m in sent] == [
        ("part one", topic),
        ("part two", topic),
    ]
    assert "reply_to_message" not in sent[1]


async def test_a_reply_goes_out_as_html_to_the_triggering_message(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    original = fake.push_message(CHAT, "question")
    message_id = await channel.send_with_id(
        reply(channel, "**Yes** & `x < y`", reply_to=f"{CHAT}:{original['message_id']}")
    )

    [call] = fake.calls("sendMessage")
    assert call.params["parse_mode"] == "HTML"
    assert call.params["text"] == "<b>Yes</b> &amp; <code>x &lt; y</code>"
    assert call.params["reply_parameters"]["message_id"] == original["message_id"]
    [sent] = fake.bot_messages(CHAT)
    assert message_id == str(sent["message_id"])
    assert sent["text"] == "Yes & x < y"
    assert [e["type"] for e in sent["entities"]] == ["bold", "code"]
    assert sent["reply_to_message"]["message_id"] == original["message_id"]
    await channel.stop()


async def test_unformatted_text_is_sent_plain(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    await channel.send(OutboundMessage(channel="telegram", chat_id="42", content="a <b> & **c**"))
    [call] = fake.calls("sendMessage")
    assert "parse_mode" not in call.params
    assert fake.bot_messages(CHAT)[0]["text"] == "a <b> & **c**"
    await channel.stop()


async def test_markdownv2_mode_sends_what_telegram_parses(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel(parse_mode="markdownv2")
    await channel.send(reply(channel, "**Done.** See [docs](https://example.com/a_(b)) - ok!"))
    [call] = fake.calls("sendMessage")
    assert call.params["parse_mode"] == "MarkdownV2"
    [sent] = fake.bot_messages(CHAT)
    assert sent["text"] == "Done. See docs - ok!"
    link = next(e for e in sent["entities"] if e["type"] == "text_link")
    assert link["url"] == "https://example.com/a_(b)"
    await channel.stop()


async def test_a_document_and_a_photo_are_uploaded(
    fake: FakeTelegram, make_channel: ChannelFactory, tmp_path: Path
) -> None:
    channel = make_channel()
    report = tmp_path / "report.csv"
    report.write_bytes(b"a,b\n1,2\n")
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"\x89PNG chart")
    message = reply(channel, "**Your files**", media=[str(report), str(chart)])
    message_id = await channel.send_with_id(message)

    [document] = fake.calls("sendDocument")
    [photo] = fake.calls("sendPhoto")
    assert document.files["document"].filename == "report.csv"
    assert document.files["document"].data == b"a,b\n1,2\n"
    assert document.params["caption"] == "<b>Your files</b>"
    assert photo.files["photo"].data == b"\x89PNG chart"
    assert "caption" not in photo.params
    sent = fake.bot_messages(CHAT)
    assert sent[0]["caption"] == "Your files"
    assert message_id == str(sent[0]["message_id"])
    await channel.stop()


async def test_a_missing_file_is_a_clear_error(make_channel: ChannelFactory) -> None:
    channel = make_channel()
    with pytest.raises(ChannelError, match="cannot read media file"):
        await channel.send(reply(channel, "here", media=["/nonexistent/file.pdf"]))
    await channel.stop()


async def test_429_becomes_rate_limited_with_the_servers_wait(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    fake.fail_next("sendMessage", 429, "Too Many Requests: retry after 7", retry_after=7)
    with pytest.raises(RateLimited) as raised:
        await channel.send(reply(channel, "hello"))
    assert raised.value.retry_after_s == 7
    assert fake.bot_messages(CHAT) == []

    await channel.send(reply(channel, "hello"))
    assert [m["text"] for m in fake.bot_messages(CHAT)] == ["hello"]
    await channel.stop()


async def test_cant_parse_entities_becomes_formatting_rejected(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    broken = OutboundMessage(
        channel="telegram", chat_id="42", content="<b>unclosed", metadata={FORMATTED: True}
    )
    with pytest.raises(FormattingRejected, match=r"(?i)can't parse entities"):
        await channel.send(broken)
    assert fake.calls("sendMessage")[0].status == 400
    await channel.stop()


async def test_too_long_not_modified_and_server_errors_are_translated(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    with pytest.raises(MessageTooLong):
        await channel.send(OutboundMessage(channel="telegram", chat_id="42", content="😀" * 2049))
    message_id = await channel.send_with_id(reply(channel, "same"))
    assert message_id is not None
    with pytest.raises(MessageNotModified):
        await channel.edit_message("42", message_id, channel.format_outbound("same"))
    fake.fail_next("sendMessage", 502, "Bad Gateway")
    with pytest.raises(TransientError):
        await channel.send(reply(channel, "x"))
    fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
    with pytest.raises(AuthError, match="blocked"):
        await channel.send(reply(channel, "x"))
    await channel.stop()


async def test_a_streamed_reply_is_edited_in_place(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    message_id = await channel.send_with_id(reply(channel, "Think"))
    assert message_id is not None
    await channel.edit_message("42", message_id, channel.format_outbound("Thinking **hard**"))
    # Raw Markdown is rendered by the channel itself: an edit carries no "formatted" flag.
    await channel.finish_stream("42", message_id, "Thinking **hard** — done")

    edits = fake.calls("editMessageText")
    assert [e.params["text"] for e in edits] == [
        "Thinking <b>hard</b>",
        "Thinking <b>hard</b> — done",
    ]
    assert all(e.params["parse_mode"] == "HTML" for e in edits)
    [shown] = fake.bot_messages(CHAT)
    assert shown["text"] == "Thinking hard — done"
    await channel.stop()


async def test_an_edit_whose_markup_is_refused_falls_back_to_plain_text(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    message_id = await channel.send_with_id(reply(channel, "start"))
    assert message_id is not None
    fake.fail_next("editMessageText", 400, "Bad Request: can't parse entities: oops")
    await channel.edit_message("42", message_id, channel.format_outbound("**bold** end"))

    first, second = fake.calls("editMessageText")
    assert first.params["parse_mode"] == "HTML"
    assert "parse_mode" not in second.params
    assert fake.bot_messages(CHAT)[0]["text"] == "**bold** end"
    await channel.stop()


async def test_typing_listening_reactions_and_deletion(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    await channel.send_typing("42")
    await channel.send_listening("42")
    message_id = await channel.send_with_id(reply(channel, "to be removed"))
    assert message_id is not None
    await channel.react_to_message("42", f"42:{message_id}", "👍")
    await channel.remove_reaction("42", message_id, "👍")
    await channel.delete_message("42", message_id)

    actions = fake.calls("sendChatAction")
    assert [a.params["action"] for a in actions] == ["typing", "record_voice"]
    first, second = fake.calls("setMessageReaction")
    assert first.params["reaction"] == [{"type": "emoji", "emoji": "👍"}]
    assert second.params.get("reaction", []) == []
    assert fake.bot_messages(CHAT) == []
    await channel.stop()


def mixed_reply(length: int, seed: int = 7) -> str:
    """Chinese prose, emoji (ZWJ families, flags, skin tones) and a fenced code block."""
    rng = random.Random(seed)
    words = [
        "你好世界",
        "消息",
        "分割",
        "测试。",
        "😀",
        "👨‍👩‍👧‍👦",
        "🇩🇪",
        "👍🏽",
        "ok",
        "<tag>",
        "&",
    ]
    paragraphs: list[str] = []
    total = 0
    while total < length:
        if rng.random() < 0.1:
            code = "\n".join(f"print('行 {i} 😀 <b>')" for i in range(rng.randint(20, 80)))
            paragraph = f"```python\n{code}\n```"
        else:
            paragraph = " ".join(rng.choice(words) for _ in range(rng.randint(20, 200)))
        paragraphs.append(paragraph)
        total += len(paragraph) + 2
    return "\n\n".join(paragraphs)[:length]


async def test_a_10000_character_cjk_and_emoji_reply_fits_telegram_chunk_by_chunk(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    text = mixed_reply(10_000)
    assert len(text) == 10_000
    chunks = fit_chunks(channel, text)
    assert len(chunks) >= 3

    for chunk in chunks:
        await channel.send(
            OutboundMessage(
                channel="telegram",
                chat_id="42",
                content=chunk.formatted,
                metadata={FORMATTED: True} if chunk.is_formatted else {},
            )
        )

    calls = fake.calls("sendMessage")
    assert len(calls) == len(chunks)
    assert all(call.status == 200 for call in calls)
    for call in calls:
        visible, _ = parse_html(call.params["text"])
        assert utf16_units(visible) <= 4096
        assert utf16_units(call.params["text"]) <= 4096
        # A code block split across chunks is closed in one and reopened in the next.
        assert call.params["text"].count("<pre>") == call.params["text"].count("</pre>")
    shown = "".join(m["text"] for m in fake.bot_messages(CHAT))
    for emoji in ("👨‍👩‍👧‍👦", "🇩🇪", "👍🏽"):
        assert shown.count(emoji) == text.count(emoji)
    assert shown.count("你好世界") == text.count("你好世界")
    await channel.stop()


async def test_a_caption_too_long_for_a_file_goes_first_as_its_own_message(
    fake: FakeTelegram, make_channel: ChannelFactory, tmp_path: Path
) -> None:
    channel = make_channel()
    attachment = tmp_path / "notes.txt"
    attachment.write_text("notes")
    long_text = "说明" * 600  # 1200 UTF-16 units: over the 1024 of a caption
    message_id = await channel.send_with_id(reply(channel, long_text, media=[str(attachment)]))

    [text] = fake.calls("sendMessage")
    [document] = fake.calls("sendDocument")
    assert text.at < document.at
    assert "caption" not in document.params
    assert message_id == str(fake.bot_messages(CHAT)[0]["message_id"])
    await channel.stop()


async def test_the_registry_builds_the_channel_with_its_allow_list(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    channel = build_channel(
        config_for(fake, allow=[12345, "@alice"]), ChannelContext("p1", tmp_path)
    )
    assert isinstance(channel, TelegramChannel)
    assert channel.name == "telegram"
    assert (channel.limit.max_units, channel.limit.unit) == (4096, "utf16")
    assert channel.supports_edit()
    assert channel.is_allowed("12345|someone")
    assert channel.is_allowed("999|Alice")
    assert not channel.is_allowed("999|mallory")
    await channel.stop()
