"""Replies to the fake Feishu: cards with update_multi, updates in place, rate limits, tokens."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bus import Attachment, OutboundMessage
from channels.errors import AuthError, ChannelError, RateLimited
from channels.feishu import FeishuChannel
from tests.channels.feishu.conftest import ALICE, DM, config_for, run_feishu
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.feishu_server.server import Upload


@pytest.fixture
async def channel(fake: FakeFeishu, tmp_path: Path) -> AsyncIterator[FeishuChannel]:
    built = FeishuChannel(config_for(fake), data_dir=tmp_path)
    yield built
    await built.stop()


def reply(text: str, delivery_id: str | None = None) -> OutboundMessage:
    return OutboundMessage(channel="feishu", chat_id=DM, content=text, delivery_id=delivery_id)


async def test_a_reply_is_an_updatable_markdown_card(
    fake: FakeFeishu, channel: FeishuChannel
) -> None:
    message_id = await channel.send_with_id(reply("**粗体** and `code`"))
    [sent] = fake.chat_messages(DM)
    assert sent.message_id == message_id
    assert sent.msg_type == "interactive"
    assert sent.updatable
    assert sent.content["elements"] == [{"tag": "markdown", "content": "**粗体** and `code`"}]


async def test_a_streamed_reply_updates_the_card_in_place(
    fake: FakeFeishu, channel: FeishuChannel
) -> None:
    message_id = await channel.send_with_id(reply("Hel"))
    assert message_id is not None
    await channel.edit_message(DM, message_id, "Hello")
    await channel.finish_stream(DM, message_id, "Hello, world")
    assert fake.texts(DM) == ["Hello, world"]
    assert len(fake.messages[message_id].updates) == 2


async def test_a_resent_delivery_is_one_message(fake: FakeFeishu, channel: FeishuChannel) -> None:
    first = await channel.send_with_id(reply("once", delivery_id="d-1"))
    again = await channel.send_with_id(reply("once", delivery_id="d-1"))
    other = await channel.send_with_id(reply("second chunk", delivery_id="d-1"))
    assert first == again != other
    assert fake.texts(DM) == ["once", "second chunk"]


def reply_file(path: Path, data: bytes, mime: str) -> Attachment:
    path.write_bytes(data)
    kind = "image" if mime.startswith("image/") else "file"
    digest = hashlib.sha256(data).hexdigest()
    return Attachment(
        kind=kind, mime=mime, name=path.name, size=len(data), sha256=digest, path=str(path)
    )


async def test_reply_files_are_uploaded_then_sent_by_their_keys(
    fake: FakeFeishu, channel: FeishuChannel, tmp_path: Path
) -> None:
    chart = reply_file(tmp_path / "chart.png", b"\x89PNG chart", "image/png")
    report = reply_file(tmp_path / "q3.pdf", b"%PDF-1.4 report", "application/pdf")
    notes = reply_file(tmp_path / "notes.csv", b"a,b\n1,2\n", "text/csv")
    sent = [
        await channel.send_attachment(DM, file, reply_to=None, delivery_key=f"turn-1.{n}")
        for n, file in enumerate((chart, report, notes), start=1)
    ]
    # A resend after a crash: the same uuid, the message Feishu already made.
    again = await channel.send_attachment(DM, chart, reply_to=None, delivery_key="turn-1.1")
    assert again == sent[0]
    image, pdf, csv = fake.chat_messages(DM)
    assert [m.message_id for m in (image, pdf, csv)] == sent
    assert image.msg_type == "image"
    assert fake.uploads[image.content["image_key"]] == Upload(
        b"\x89PNG chart", "chart.png", "image"
    )
    assert (pdf.msg_type, csv.msg_type) == ("file", "file")
    assert fake.uploads[pdf.content["file_key"]] == Upload(b"%PDF-1.4 report", "q3.pdf", "pdf")
    assert fake.uploads[csv.content["file_key"]].file_type == "stream"
    assert channel.max_attachment_bytes("video") == 30 * 1024 * 1024


async def test_a_rate_limit_says_how_long_to_wait(fake: FakeFeishu, channel: FeishuChannel) -> None:
    fake.rate_limit_next("send")
    with pytest.raises(RateLimited) as limited:
        await channel.send(reply("x"))
    assert limited.value.retry_after_s == 1.0
    message_id = await channel.send_with_id(reply("x"))
    assert message_id is not None
    fake.rate_limit_next("patch")
    with pytest.raises(RateLimited):
        await channel.edit_message(DM, message_id, "y")


async def test_a_reaction_is_feishus_emoji_type_and_is_deleted_by_its_id(
    fake: FakeFeishu,
) -> None:
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        await fake.push_event(fake.message_event(ALICE, DM, "refund?"))
        [received] = await running.inbound.wait_for(1)
        channel, target = running.channel, str(received.metadata["feishu_message_id"])
        # The gateway names the message by its event id; Feishu's API by its message id.
        question = received.message_id
        assert question is not None
        assert question != target
        await channel.react_to_message(DM, question, "👀")
        await channel.react_to_message(DM, question, "👍")
        # A retry of a reaction that was made adds none.
        await channel.react_to_message(DM, question, "👍")
        # An emoji Feishu has no type for is left out, not refused.
        await channel.react_to_message(DM, question, "🦜")
        assert sorted(fake.reactions.values()) == [(target, "GLANCE"), (target, "THUMBSUP")]
        await channel.remove_reaction(DM, question, "👀")
        assert list(fake.reactions.values()) == [(target, "THUMBSUP")]


async def test_an_invalid_token_is_refetched_and_the_call_repeated(
    fake: FakeFeishu, channel: FeishuChannel
) -> None:
    await channel.send(reply("first"))
    before = fake.token_calls
    fake.expire_tokens()
    await channel.send(reply("second"))
    assert fake.token_calls == before + 1
    assert fake.texts(DM) == ["first", "second"]


async def test_a_chat_the_bot_is_not_in_is_a_typed_refusal(channel: FeishuChannel) -> None:
    with pytest.raises(ChannelError, match="230002"):
        await channel.send(OutboundMessage(channel="feishu", chat_id="nowhere", content="x"))


async def test_probe_names_the_bot_and_refuses_a_wrong_secret(
    fake: FakeFeishu, tmp_path: Path
) -> None:
    good = FeishuChannel(config_for(fake), data_dir=tmp_path)
    assert await good.probe() == f"Fake Bot ({fake.bot_open_id})"
    bad = FeishuChannel(config_for(fake, app_secret="wrong"), data_dir=tmp_path)
    with pytest.raises(AuthError):
        await bad.probe()


async def test_a_card_at_the_limit_fits_feishus_body_limit(
    fake: FakeFeishu, channel: FeishuChannel
) -> None:
    text = "长回复\n" * (channel.limit.max_units // 10)
    assert channel.limit.fits(text)
    await channel.send(reply(text))
    assert fake.texts(DM) == [text]
