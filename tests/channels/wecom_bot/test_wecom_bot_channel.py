"""The WeCom AI bot channel against the fake WeCom websocket server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from bus import InboundMessage, OutboundMessage, create_bus
from bus.envelope import ANSWERS
from channels.errors import FatalChannelError, RateLimited
from channels.wecom_bot import WecomBotChannel
from channels.wecom_bot.frames import MalformedFrame, parse_callback, parse_frame
from tests.channels.wecom_bot.configs import wecom_bot_config
from tests.channels.wecom_bot.conftest import Running
from tests.fakes.wecom_bot_server import FakeWecomBot

WAIT_S = 10.0


def reply(message: InboundMessage, text: str) -> OutboundMessage:
    return OutboundMessage(
        channel="wecom-bot",
        chat_id=message.chat_id,
        content=text,
        reply_to=message.message_id,
        metadata={ANSWERS: [message.message_id]},
    )


async def test_subscribes_with_the_bot_credentials_and_publishes_a_text_message(
    running: Running,
) -> None:
    assert running.fake.subscribes == [{"bot_id": "aibFAKEBOT01", "secret": "fake-bot-secret"}]
    _req_id, msg_id = await running.fake.push_text("alice", "hello bot")
    message = await running.next_inbound()
    assert (message.sender_id, message.chat_id, message.content) == ("alice", "alice", "hello bot")
    assert message.message_id == msg_id
    assert message.metadata["chat_type"] == "single"


async def test_a_group_message_is_in_the_group_chat(running: Running) -> None:
    await running.fake.push_text("bob", "hi all", chat_id="wrGROUP1")
    message = await running.next_inbound()
    assert (message.sender_id, message.chat_id) == ("bob", "wrGROUP1")


async def test_a_whole_reply_answers_the_callback_as_one_finished_stream(
    running: Running,
) -> None:
    req_id, _ = await running.fake.push_text("alice", "ping")
    message = await running.next_inbound()
    await running.channel.send(reply(message, "pong"))
    [frame] = running.fake.frames(req_id)
    assert (frame.content, frame.finish) == ("pong", True)
    # A second message for the same callback cannot take its req_id again: it is sent anew.
    await running.channel.send(reply(message, "and more"))
    assert running.fake.markdown_to("alice") == ["and more"]
    assert running.fake.violations == []


async def test_a_stream_waits_for_each_acknowledgement_and_finishes_once(
    running: Running,
) -> None:
    running.fake.ack_delay_s = 0.05
    req_id, _ = await running.fake.push_text("alice", "stream please")
    message = await running.next_inbound()
    stream_id = await running.channel.send_with_id(reply(message, "one"))
    assert stream_id is not None
    # Frames sent concurrently still go out one acknowledgement at a time, in order.
    await asyncio.gather(
        running.channel.edit_message("alice", stream_id, "one two"),
        running.channel.edit_message("alice", stream_id, "one two three"),
        running.channel.edit_message("alice", stream_id, "one two three four"),
    )
    await running.channel.finish_stream("alice", stream_id, "one two three four five")
    frames = running.fake.frames(req_id)
    assert [f.content for f in frames] == [
        "one",
        "one two",
        "one two three",
        "one two three four",
        "one two three four five",
    ]
    assert [f.finish for f in frames] == [False, False, False, False, True]
    assert {f.stream_id for f in frames} == {stream_id}
    assert running.fake.violations == []


async def test_concurrent_turns_answer_their_own_callbacks(running: Running) -> None:
    first_req, _ = await running.fake.push_text("alice", "first")
    second_req, _ = await running.fake.push_text("alice", "second")
    first, second = await running.next_inbound(), await running.next_inbound()
    await asyncio.gather(
        running.channel.send(reply(second, "answer to second")),
        running.channel.send(reply(first, "answer to first")),
    )
    assert running.fake.finished_text(first_req) == "answer to first"
    assert running.fake.finished_text(second_req) == "answer to second"


async def test_a_rate_limited_frame_raises_rate_limited(running: Running) -> None:
    await running.fake.push_text("alice", "slow down")
    message = await running.next_inbound()
    running.fake.rate_limit_next()
    with pytest.raises(RateLimited):
        await running.channel.send(reply(message, "too fast"))


async def test_a_long_own_message_is_split_to_the_markdown_limit(running: Running) -> None:
    text = "长回复会被拆分。" * 700  # 16,800 bytes
    await running.channel.send(OutboundMessage(channel="wecom-bot", chat_id="carol", content=text))
    pieces = running.fake.markdown_to("carol")
    assert len(pieces) > 1
    assert all(len(piece.encode()) <= 4096 for piece in pieces)
    assert "".join(pieces) == text
    assert running.fake.violations == []


async def test_a_duplicate_callback_is_published_once_and_malformed_frames_skipped(
    running: Running,
) -> None:
    await running.fake.push_text("alice", "once", msg_id="msgDUP1")
    assert (await running.next_inbound()).content == "once"
    await running.fake.push_text("alice", "once", msg_id="msgDUP1")
    await running.fake.push_raw("not json")
    await running.fake.push_raw('{"cmd": "aibot_msg_callback", "headers": {"req_id": "x"}}')
    await running.fake.push_text("alice", "after")
    assert (await running.next_inbound()).content == "after"


async def test_a_dropped_connection_reconnects_and_subscribes_again(running: Running) -> None:
    await running.fake.drop_connections()
    await running.fake.wait_subscribed(count=2, timeout_s=WAIT_S)
    await running.fake.push_text("alice", "still there?")
    assert (await running.next_inbound()).content == "still there?"


async def test_a_wrong_secret_is_fatal(tmp_path: Path) -> None:
    async with FakeWecomBot() as fake:
        channel = WecomBotChannel(wecom_bot_config(fake, secret="wrong"), data_dir=tmp_path)
        _agent, publisher = create_bus(4)
        with pytest.raises(FatalChannelError, match="40058"):
            await asyncio.wait_for(channel.start(publisher.inbound_sender()), WAIT_S)


async def test_probe_names_the_bot(tmp_path: Path) -> None:
    async with FakeWecomBot() as fake:
        channel = WecomBotChannel(wecom_bot_config(fake), data_dir=tmp_path)
        assert await channel.probe() == "WeCom AI bot aibFAKEBOT01"


def test_frames_without_the_protocol_fields_are_malformed() -> None:
    with pytest.raises(MalformedFrame):
        parse_frame('{"cmd": "aibot_msg_callback"}')
    frame = parse_frame('{"cmd": "aibot_msg_callback", "headers": {"req_id": "r"}, "body": {}}')
    with pytest.raises(MalformedFrame, match="msgid"):
        parse_callback(frame)


async def test_an_image_is_downloaded_and_decrypted_with_its_aeskey(running: Running) -> None:
    fake = running.fake
    photo = b"\x89PNG alice's photo"
    await fake.push_media("alice", "image", fake.add_file(photo))
    message = await running.next_inbound()
    [path] = message.media
    with open(path, "rb") as saved:  # noqa: ASYNC230 (a small local file in a test)
        assert saved.read() == photo
    assert (message.content, Path(path).suffix) == ("", ".png")


async def test_a_mixed_message_keeps_its_text_and_a_file_its_name(running: Running) -> None:
    fake = running.fake
    items = [
        {"msgtype": "text", "text": {"content": "what is this?"}},
        {"msgtype": "image", "image": fake.add_file(b"\xff\xd8\xff jpeg")},
    ]
    await fake.push_media("alice", "mixed", {"msg_item": items})
    mixed = await running.next_inbound()
    assert mixed.content == "what is this?"
    [image_path] = mixed.media
    assert Path(image_path).suffix == ".jpg"
    await fake.push_media("alice", "file", fake.add_file(b"%PDF-1.7", filename="plan.pdf"))
    document = await running.next_inbound()
    [plan_path] = document.media
    assert plan_path.endswith("_plan.pdf")


async def test_a_file_over_the_limit_is_named_and_not_kept(running: Running) -> None:
    running.channel.max_media_bytes = 1000
    fake = running.fake
    await fake.push_media("alice", "file", fake.add_file(b"x" * 2000, filename="a.zip"))
    message = await running.next_inbound()
    assert message.media == []
    assert message.content == "[file, not downloaded: larger than the 1000 bytes limit]"


async def test_a_failed_download_leaves_a_placeholder(running: Running) -> None:
    fake = running.fake
    gone = {"url": f"{fake.origin}/files/gone", "aeskey": "A" * 43}
    with capture_logs() as logs:
        await fake.push_media("alice", "image", gone)
        message = await running.next_inbound()
    assert message.media == []
    assert message.content == "[image, not downloaded: the download answered HTTP 404]"
    [warning] = [entry for entry in logs if entry["event"] == "media.not_downloaded"]
    assert (warning["channel"], warning["message_id"]) == ("wecom-bot", message.message_id)


async def test_a_strangers_image_is_not_downloaded(running: Running) -> None:
    fake = running.fake
    await fake.push_media("mallory", "image", fake.add_file(b"\xff\xd8\xff"))
    message = await running.next_inbound()
    assert (message.content, message.media) == ("[image]", [])
    assert fake.file_requests == []


async def test_a_voice_message_keeps_the_text_wecom_recognised(running: Running) -> None:
    await running.fake.push_media("alice", "voice", {"content": "明天开会"})
    assert (await running.next_inbound()).content == "明天开会"
