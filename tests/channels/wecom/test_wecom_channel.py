"""The WeCom channel against the fake WeCom: callbacks through its routes, replies by the API."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from bus import Attachment, OutboundMessage
from channels.access.allow import AllowList
from channels.base import FORMATTED
from channels.errors import AuthError, ChannelError, FatalChannelError, RateLimited
from channels.media_info import MEDIA_DETAILS
from channels.wecom import WeComChannel
from channels.wecom.channel import SendWindow
from config import WeComConfig
from tests.channels.conftest import FakeClock
from tests.channels.inbound_gate import GatedInbound
from tests.channels.started import once, serving_webhooks, started
from tests.fakes.wecom_server import FakeWeCom, Upload

PATH = "/wecom/callback"


def config_for(fake: FakeWeCom, **overrides: object) -> WeComConfig:
    values: dict[str, object] = {
        "corp_id": fake.corp_id,
        "agent_id": fake.agent_id,
        "secret": fake.secret,
        "token": fake.token,
        "encoding_aes_key": fake.encoding_aes_key,
        "api_base_url": fake.base_url,
        "allow": ["alice"],
    }
    values.update(overrides)
    return WeComConfig.model_validate(values)


@dataclass
class Running:
    fake: FakeWeCom
    channel: WeComChannel
    inbound: GatedInbound
    url: str
    task: asyncio.Task[None]


@pytest.fixture
async def fake() -> AsyncIterator[FakeWeCom]:
    async with FakeWeCom() as server:
        yield server


@pytest.fixture
async def running(fake: FakeWeCom, tmp_path: Path) -> AsyncIterator[Running]:
    channel = WeComChannel(config_for(fake), data_dir=tmp_path)
    channel.allow = AllowList(["alice"])
    inbound = GatedInbound()
    ready = once(lambda: fake.wait_until(lambda: fake.token_calls >= 1))
    async with (
        serving_webhooks(channel) as server,
        started(channel, inbound, ready, name="wecom-under-test") as task,
    ):
        yield Running(fake, channel, inbound, server.origin + PATH, task)


async def test_the_url_check_is_answered_with_the_decrypted_echo(running: Running) -> None:
    status, text = await running.fake.verify_url(running.url)
    assert (status, text) == (200, "1616140317555161061")


async def test_a_message_is_published_and_acknowledged_only_once_durable(
    running: Running,
) -> None:
    fake, inbound = running.fake, running.inbound
    inbound.hold()
    posting = asyncio.create_task(
        fake.post_message(running.url, fake.text_message("alice", "你好 WeCom", msg_id=77)),
        name="post",
    )
    await asyncio.wait_for(inbound.holding.wait(), 5)
    await asyncio.sleep(0)
    assert not posting.done(), "WeCom was answered before the message was durable"
    inbound.release.set()
    assert await asyncio.wait_for(posting, 5) == (200, "")
    [message] = inbound.messages
    assert (message.channel, message.sender_id, message.chat_id) == ("wecom", "alice", "alice")
    assert (message.content, message.message_id) == ("你好 WeCom", "77")


async def test_a_retried_callback_is_answered_and_published_once(running: Running) -> None:
    fake = running.fake
    plain = fake.text_message("alice", "once", msg_id=88)
    assert await fake.post_message(running.url, plain) == (200, "")
    assert await fake.post_message(running.url, plain) == (200, "")
    assert [m.message_id for m in running.inbound.messages] == ["88"]


async def test_a_full_backlog_asks_wecom_to_retry(running: Running) -> None:
    fake = running.fake
    running.inbound.refuse_next()
    plain = fake.text_message("alice", "later", msg_id=99)
    status, _ = await fake.post_message(running.url, plain)
    assert status == 503
    assert not running.inbound.messages
    assert await fake.post_message(running.url, plain) == (200, "")
    assert [m.content for m in running.inbound.messages] == ["later"]


async def test_events_and_non_text_messages_are_acknowledged_and_skipped(
    running: Running,
) -> None:
    fake = running.fake
    event = (
        f"<xml><ToUserName>{fake.corp_id}</ToUserName><FromUserName>alice</FromUserName>"
        "<CreateTime>1</CreateTime><MsgType>event</MsgType><Event>enter_agent</Event>"
        f"<AgentID>{fake.agent_id}</AgentID></xml>"
    ).encode()
    assert await fake.post_message(running.url, event) == (200, "")
    assert await fake.post_message(running.url, b"<xml><oops") == (200, "")
    assert not running.inbound.messages


async def test_forged_stale_unsigned_and_foreign_callbacks_are_refused(running: Running) -> None:
    fake = running.fake
    forgeries = fake.forgeries(fake.text_message("alice", "forged"))
    for name, (expected, query, body) in forgeries.items():
        status, _ = await fake.post_callback(running.url, query, body)
        assert status == expected, name
    assert not running.inbound.messages


async def test_replies_are_markdown_when_formatted_and_text_otherwise(running: Running) -> None:
    fake, channel = running.fake, running.channel
    await channel.send(
        OutboundMessage(
            channel="wecom", chat_id="alice", content="**hi**", metadata={FORMATTED: True}
        )
    )
    await channel.send(OutboundMessage(channel="wecom", chat_id="alice", content="plain"))
    assert [(m.msgtype, m.content, m.agentid) for m in fake.delivered("alice")] == [
        ("markdown", "**hi**", fake.agent_id),
        ("text", "plain", fake.agent_id),
    ]


def reply_file(path: Path, data: bytes, mime: str) -> Attachment:
    path.write_bytes(data)
    kind = "image" if mime.startswith("image/") else "file"
    digest = hashlib.sha256(data).hexdigest()
    return Attachment(
        kind=kind, mime=mime, name=path.name, size=len(data), sha256=digest, path=str(path)
    )


async def test_reply_files_are_uploaded_and_sent_by_media_id(
    running: Running, tmp_path: Path
) -> None:
    fake, channel = running.fake, running.channel
    chart = reply_file(tmp_path / "chart.png", b"\x89PNG chart", "image/png")
    report = reply_file(tmp_path / "q3.pdf", b"%PDF-1.4 report", "application/pdf")
    tiny = reply_file(tmp_path / "x.txt", b"ok", "text/plain")
    for number, file in enumerate((chart, report, tiny), start=1):
        await channel.send_attachment("alice", file, reply_to=None, delivery_key=f"t.{number}")
    image, document, link = fake.delivered("alice")
    assert fake.uploads[image.media_id] == Upload(b"\x89PNG chart", "chart.png", "image")
    assert image.msgtype == "image"
    assert fake.uploads[document.media_id] == Upload(b"%PDF-1.4 report", "q3.pdf", "file")
    assert document.msgtype == "file"
    # WeCom refuses files of 5 bytes or less: that one is named in text.
    assert link.msgtype == "text"
    assert "x.txt" in link.content
    assert channel.max_attachment_bytes("file") == 20 * 1024 * 1024


async def test_an_expired_token_is_refetched_and_the_send_repeated(running: Running) -> None:
    fake = running.fake
    before = fake.token_calls
    fake.expire_tokens()
    await running.channel.send(OutboundMessage(channel="wecom", chat_id="alice", content="x"))
    assert fake.token_calls == before + 1
    assert fake.texts("alice") == ["x"]


async def test_a_rate_limit_is_a_typed_wait_and_an_unknown_user_a_refusal(
    running: Running,
) -> None:
    fake = running.fake
    fake.rate_limit_next()
    with pytest.raises(RateLimited) as limited:
        await running.channel.send(OutboundMessage(channel="wecom", chat_id="alice", content="x"))
    assert limited.value.retry_after_s > 0
    with pytest.raises(ChannelError):
        await running.channel.send(OutboundMessage(channel="wecom", chat_id="nobody", content="x"))


async def test_wrong_credentials_are_fatal_at_start(fake: FakeWeCom, tmp_path: Path) -> None:
    channel = WeComChannel(config_for(fake, secret="not-the-secret"), data_dir=tmp_path)
    with pytest.raises(FatalChannelError, match="40001"):
        await asyncio.wait_for(channel.start(GatedInbound()), 5)
    with pytest.raises(AuthError):
        await channel.probe()
    assert (await channel.health_check()).is_down
    await channel.stop()


async def test_probe_names_the_corp_and_agent(fake: FakeWeCom, tmp_path: Path) -> None:
    channel = WeComChannel(config_for(fake), data_dir=tmp_path)
    try:
        assert await channel.probe() == f"corp {fake.corp_id}, agent {fake.agent_id}"
    finally:
        await channel.stop()


def test_the_send_window_counts_30_a_minute_per_member() -> None:
    clock = FakeClock()
    window = SendWindow(clock=clock)
    waits = []
    for _ in range(30):
        waits.append(window.reserve("alice"))
        clock.advance(1.0)
    assert waits == [0.0] * 30
    assert window.reserve("alice") == pytest.approx(30.0)  # the first send ages out at 60 s
    assert window.reserve("bob") == 0.0
    clock.advance(30.0)
    assert window.reserve("alice") == 0.0


async def test_the_31st_message_in_a_minute_waits_instead_of_being_dropped(
    fake: FakeWeCom, tmp_path: Path
) -> None:
    channel = WeComChannel(config_for(fake), data_dir=tmp_path, window=SendWindow(max_sends=2))
    try:
        for text in ("one", "two"):
            await channel.send(OutboundMessage(channel="wecom", chat_id="alice", content=text))
        with pytest.raises(RateLimited) as limited:
            await channel.send(OutboundMessage(channel="wecom", chat_id="alice", content="3"))
        assert 0 < limited.value.retry_after_s <= 60
        assert fake.texts("alice") == ["one", "two"]
    finally:
        await channel.stop()


async def test_an_image_and_a_voice_note_are_fetched_by_their_media_id(running: Running) -> None:
    fake = running.fake
    fake.add_media("m_photo", b"\xff\xd8 alice's photo", "image/jpeg")
    fake.add_media("m_voice", b"#!AMR voice", "voice/amr")
    for plain in (
        fake.media_message("alice", "image", "m_photo"),
        fake.media_message("alice", "voice", "m_voice"),
    ):
        assert await fake.post_message(running.url, plain) == (200, "")

    image, voice = running.inbound.messages
    [path] = image.media
    with open(path, "rb") as saved:  # noqa: ASYNC230 (a small local file in a test)
        assert saved.read() == b"\xff\xd8 alice's photo"
    assert (image.content, Path(path).suffix) == ("", ".jpg")
    [voice_path] = voice.media
    assert Path(voice_path).suffix == ".amr"
    assert voice.metadata[MEDIA_DETAILS][voice_path] == {"mime": "audio/amr"}
    assert fake.media_requests == ["m_photo", "m_voice"]


async def test_a_file_over_the_limit_is_named_and_not_kept(running: Running) -> None:
    running.channel.max_media_bytes = 1000
    fake = running.fake
    fake.add_media("m_video", b"x" * 2000, "video/mp4")
    assert await fake.post_message(
        running.url, fake.media_message("alice", "video", "m_video")
    ) == (
        200,
        "",
    )
    [message] = running.inbound.messages
    assert message.media == []
    assert message.content == "[video, not downloaded: larger than the 1000 bytes limit]"


async def test_a_refused_media_id_leaves_a_placeholder(running: Running) -> None:
    fake = running.fake
    with capture_logs() as logs:
        plain = fake.media_message("alice", "image", "m_gone")
        assert await fake.post_message(running.url, plain) == (200, "")
    [message] = running.inbound.messages
    assert message.media == []
    assert message.content == (
        "[image, not downloaded: media/get: errcode 40007 (invalid media_id)]"
    )
    [warning] = [entry for entry in logs if entry["event"] == "media.not_downloaded"]
    assert (warning["channel"], warning["message_id"]) == ("wecom", message.message_id)


async def test_a_strangers_image_is_not_fetched(running: Running) -> None:
    fake = running.fake
    fake.add_media("m_m", b"\xff\xd8", "image/jpeg")
    assert await fake.post_message(running.url, fake.media_message("mallory", "image", "m_m")) == (
        200,
        "",
    )
    [message] = running.inbound.messages
    assert (message.content, message.media) == ("[image]", [])
    assert fake.media_requests == []
