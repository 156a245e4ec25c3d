"""The QQ bot channel: its webhook on a local server, its replies against the fake QQ."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from structlog.testing import capture_logs

from bus import Attachment, InboundMessage, OutboundMessage, create_bus
from channels.access.allow import AllowList
from channels.errors import FatalChannelError, RateLimited
from channels.media_info import MEDIA_DETAILS
from channels.media_links import MediaLinks
from channels.outbound.delivery import fit_chunks
from channels.qq import QQBotChannel, seed_from_secret, sign_hex, signing_key
from channels.qq.api import ReplyWindowClosed
from tests.channels.qq.configs import PATH, qq_config
from tests.channels.started import (
    OnBus,
    once,
    webhooks_on_bus,
)
from tests.fakes.qq_server import FakeQQ, MediaUpload, qq_seed

WAIT_S = 10.0


@dataclass
class Running(OnBus[FakeQQ, QQBotChannel]):
    url: str


def make_channel(
    fake: FakeQQ, secret: str | None = None, *, data_dir: Path | None = None
) -> QQBotChannel:
    return QQBotChannel(qq_config(fake, app_secret=secret or fake.app_secret), data_dir=data_dir)


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    async with FakeQQ() as fake:
        channel = make_channel(fake, data_dir=tmp_path)
        channel.allow = AllowList(["alice"])
        ready = once(lambda: fake.wait_until(lambda: fake.token_requests >= 1))
        async with webhooks_on_bus(channel, ready, name="test:qq", capacity=16) as (
            agent,
            _task,
            origin,
        ):
            yield Running(fake, channel, agent, origin + PATH)


def answer(message: InboundMessage, text: str, delivery_id: str | None = None) -> OutboundMessage:
    return OutboundMessage(
        channel="qq-bot",
        chat_id=message.chat_id,
        content=text,
        reply_to=message.message_id,
        delivery_id=delivery_id,
    )


def test_the_documented_validation_example_is_signed_as_qq_documents() -> None:
    # QQ's webhook documentation: secret, plain_token and event_ts, and the expected signature.
    key = signing_key("DG5g3B4j9X2KOErG")
    assert sign_hex(key, b"1725442341Arq0D5A61EgUu4OxUvOp") == (
        "87befc99c42c651b3aac0278e71ada338433ae26fcb24307bdc5ad38c1adc2d0"
        "1bcfcadc0842edac85e85205028a1132afe09280305f13aa6909ffc2d652c706"
    )


def test_the_seed_repeats_the_secret_to_32_bytes_like_qq_documents() -> None:
    assert seed_from_secret("abc") == (b"abc" * 11)[:32]
    assert seed_from_secret("naOC0ocQE3shWLAfffVLB1rhYPG7") == qq_seed(
        "naOC0ocQE3shWLAfffVLB1rhYPG7"
    )
    long = "x" * 40
    assert seed_from_secret(long) == b"x" * 32


async def test_op_13_is_answered_with_the_signature_of_event_ts_and_plain_token(
    running: Running,
) -> None:
    status, body = await running.fake.validate(running.url, "Arq0D5A61EgUu4OxUvOp", "1725442341")
    assert status == 200
    assert body["plain_token"] == "Arq0D5A61EgUu4OxUvOp"
    public = Ed25519PrivateKey.from_private_bytes(qq_seed(running.fake.app_secret)).public_key()
    public.verify(bytes.fromhex(body["signature"]), b"1725442341Arq0D5A61EgUu4OxUvOp")


async def test_a_c2c_message_is_published_then_acknowledged_with_op_12(running: Running) -> None:
    event = running.fake.c2c_message("alice-openid", "hello qq")
    status, body = await running.fake.deliver(running.url, event)
    assert (status, body) == (200, {"op": 12, "d": 0})
    message = await running.next_inbound()
    assert (message.chat_id, message.sender_id, message.content) == (
        "c2c:alice-openid",
        "alice-openid",
        "hello qq",
    )
    assert message.message_id == event["d"]["id"]


async def test_a_group_mention_is_in_the_group_chat(running: Running) -> None:
    await running.fake.deliver(running.url, running.fake.group_message("G1", "bob", "hi bot"))
    message = await running.next_inbound()
    assert (message.chat_id, message.sender_id, message.content) == ("group:G1", "bob", "hi bot")


async def test_forged_stale_and_unsigned_events_are_refused(running: Running) -> None:
    fake = running.fake
    body = json.dumps(fake.c2c_message("alice-openid", "forged")).encode()
    other_key = Ed25519PrivateKey.from_private_bytes(qq_seed("someone-else's-secret"))
    stamp = str(int(time.time()))
    forged = {**fake.sign(body), "X-Signature-Ed25519": other_key.sign(stamp.encode() + body).hex()}
    forged["X-Signature-Timestamp"] = stamp
    tampered = fake.sign(body)
    stale = fake.sign(body, timestamp=int(time.time()) - 3600)
    unsigned = {"Content-Type": "application/json"}
    for headers in (forged, stale, unsigned):
        status, _ = await fake.post(running.url, body, headers)
        assert status == 401
    status, _ = await fake.post(running.url, body.replace(b"forged", b"FORGED"), tampered)
    assert status == 401
    # An unsigned request is taken only as the op 13 check, and that signs no event body.
    oracle = json.dumps({"op": 13, "d": {"plain_token": '{"op":0}', "event_ts": "1"}}).encode()
    assert (await fake.post(running.url, oracle, unsigned))[0] == 400
    validation = json.dumps({"op": 13, "d": {"plain_token": "abc", "event_ts": "1"}}).encode()
    bad = {**fake.sign(validation), "X-Signature-Ed25519": "ab" * 64}
    assert (await fake.post(running.url, validation, bad))[0] == 401  # signed, so checked
    # Nothing got through.
    await fake.deliver(running.url, fake.c2c_message("alice-openid", "real"))
    assert (await running.next_inbound()).content == "real"


async def test_a_redelivered_event_is_published_once(running: Running) -> None:
    event = running.fake.c2c_message("alice-openid", "only once")
    assert (await running.fake.deliver(running.url, event))[0] == 200
    assert (await running.fake.deliver(running.url, event))[0] == 200
    await running.fake.deliver(running.url, running.fake.c2c_message("alice-openid", "next"))
    assert [(await running.next_inbound()).content for _ in range(2)] == ["only once", "next"]


async def test_replies_count_msg_seq_per_message_and_stop_at_five(running: Running) -> None:
    fake = running.fake
    await fake.deliver(running.url, fake.c2c_message("alice-openid", "one"))
    await fake.deliver(running.url, fake.c2c_message("alice-openid", "two"))
    first, second = await running.next_inbound(), await running.next_inbound()
    for n in range(5):
        await running.channel.send(answer(first, f"first {n}"))
    await running.channel.send(answer(second, "second 0"))
    with pytest.raises(ReplyWindowClosed):
        await running.channel.send(answer(first, "a sixth"))
    seqs = [(r.msg_id, r.msg_seq) for r in fake.replies]
    assert seqs == [*((first.message_id, n) for n in range(1, 6)), (second.message_id, 1)]
    assert fake.violations == []


async def test_a_resent_part_repeats_its_pair_and_is_not_shown_twice(running: Running) -> None:
    fake = running.fake
    await fake.deliver(running.url, fake.c2c_message("alice-openid", "resend"))
    message = await running.next_inbound()
    await running.channel.send(answer(message, "part one", delivery_id="turn-1.0"))
    await running.channel.send(answer(message, "part one", delivery_id="turn-1.0"))
    assert fake.replies_to("c2c:alice-openid") == ["part one"]
    assert [r.code for r in fake.replies] == [None, 40054005]


def reply_file(data_dir: Path, name: str, data: bytes, mime: str) -> Attachment:
    path = data_dir / "media" / "out" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    kind = "image" if mime.startswith("image/") else "file"
    digest = hashlib.sha256(data).hexdigest()
    return Attachment(
        kind=kind, mime=mime, name=name, size=len(data), sha256=digest, path=str(path)
    )


async def test_an_image_is_rich_media_by_its_public_link_and_a_pdf_the_link(
    running: Running, tmp_path: Path
) -> None:
    fake, channel = running.fake, running.channel
    await fake.deliver(running.url, fake.c2c_message("alice-openid", "chart please"))
    message = await running.next_inbound()
    chart = reply_file(tmp_path, "chart.png", b"\x89PNG chart", "image/png")
    report = reply_file(tmp_path, "q3.pdf", b"%PDF-1.4", "application/pdf")
    channel.media_links = MediaLinks(b"s" * 32, tmp_path, base_url="https://bot.example.org")
    await channel.send(answer(message, "Here:", delivery_id="turn-1.0"))
    for number, file in enumerate((chart, report), start=1):
        await channel.send_attachment(
            message.chat_id, file, reply_to=message.message_id, delivery_key=f"turn-1.file{number}"
        )
    # A resend after a restart: the same pair, which QQ knows; shown once.
    await channel.send_attachment(
        message.chat_id, chart, reply_to=message.message_id, delivery_key="turn-1.file1"
    )
    text, image, link, again = fake.replies
    assert [r.msg_seq for r in (text, image, link)] == [1, 11, 12]
    upload = fake.media_uploads[image.file_info]
    assert upload.file_type == 1
    assert upload.url.startswith("https://bot.example.org/media/")
    assert upload == MediaUpload("c2c:alice-openid", 1, upload.url)
    assert "https://bot.example.org/media/" in link.content
    assert again.code == 40054005
    assert fake.violations == []


async def test_rate_limit_and_refused_token(running: Running) -> None:
    fake = running.fake
    await fake.deliver(running.url, fake.c2c_message("alice-openid", "go"))
    message = await running.next_inbound()
    fake.rate_limit_next()
    with pytest.raises(RateLimited):
        await running.channel.send(answer(message, "too soon"))
    fake.expire_token()
    await running.channel.send(answer(message, "with a fresh token"))
    assert fake.replies_to("c2c:alice-openid") == ["with a fresh token"]
    assert fake.token_requests == 2


async def test_a_long_reply_takes_at_most_five_messages_the_last_a_notice(running: Running) -> None:
    chunks = fit_chunks(running.channel, "word " * 5000)
    assert len(chunks) == 5
    assert all(len(chunk.formatted) <= 4000 for chunk in chunks)
    assert "truncated" in chunks[-1].formatted.lower() or "omitted" in chunks[-1].formatted


async def test_a_wrong_secret_is_fatal_and_probe_names_the_bot() -> None:
    async with FakeQQ() as fake:
        _agent, publisher = create_bus(4)
        with pytest.raises(FatalChannelError):
            await asyncio.wait_for(
                make_channel(fake, "wrong-secret").start(publisher.inbound_sender()), WAIT_S
            )
        assert await make_channel(fake).probe() == "QQ bot octos-test-bot (id bot-openid)"


def attachment(
    url: str, content_type: str, filename: str, size: int, **extra: object
) -> dict[str, object]:
    return {"content_type": content_type, "filename": filename, "url": url, "size": size} | extra


async def test_an_image_attachment_is_downloaded_with_its_details(running: Running) -> None:
    fake = running.fake
    photo = b"\xff\xd8 alice's photo"
    url = fake.add_file(photo, "image/jpeg")
    image = attachment(url, "image/jpeg", "photo.jpg", len(photo), width=1280, height=960)
    event = fake.c2c_message("alice", "look", attachments=[image])
    assert (await fake.deliver(running.url, event))[0] == 200
    message = await running.next_inbound()
    [path] = message.media
    with open(path, "rb") as saved:  # noqa: ASYNC230 (a small local file in a test)
        assert saved.read() == photo
    assert message.content == "look"
    assert message.metadata[MEDIA_DETAILS][path] == {"name": "photo.jpg", "mime": "image/jpeg"}


async def test_an_attachment_over_the_limit_is_named_and_not_downloaded(running: Running) -> None:
    running.channel.max_media_bytes = 1000
    fake = running.fake
    url = fake.add_file(b"x", "application/zip")
    big = attachment(url, "application/zip", "photos.zip", 31 * 1024 * 1024)
    assert (await fake.deliver(running.url, fake.c2c_message("alice", "", attachments=[big])))[
        0
    ] == 200
    message = await running.next_inbound()
    assert message.media == []
    assert message.content == (
        "[file: photos.zip, 31 MB, not downloaded: larger than the 1000 bytes limit]"
    )
    assert fake.file_requests == []


async def test_a_failed_download_leaves_a_placeholder(running: Running) -> None:
    fake = running.fake
    gone = attachment(f"{fake.origin}/download/gone", "image/png", "a.png", 10)
    with capture_logs() as logs:
        event = fake.c2c_message("alice", "", attachments=[gone])
        assert (await fake.deliver(running.url, event))[0] == 200
        message = await running.next_inbound()
    assert message.media == []
    assert (
        message.content
        == "[image: a.png, 10 bytes, not downloaded: the download answered HTTP 404]"
    )
    [warning] = [entry for entry in logs if entry["event"] == "media.not_downloaded"]
    assert (warning["channel"], warning["message_id"]) == ("qq-bot", message.message_id)


async def test_a_strangers_attachment_is_not_downloaded(running: Running) -> None:
    fake = running.fake
    url = fake.add_file(b"\xff\xd8", "image/jpeg")
    image = attachment(url, "image/jpeg", "p.jpg", 2)
    event = fake.c2c_message("mallory", "", attachments=[image])
    assert (await fake.deliver(running.url, event))[0] == 200
    message = await running.next_inbound()
    assert (message.content, message.media) == ("[image]", [])
    assert fake.file_requests == []
