"""The WhatsApp channel in process: its Graph client against the fake Cloud API, and its
webhook routes served by a local aiohttp server, as the daemon serves them."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from bus import CALLBACK, REACTION, REPLY_TO, Attachment, Button, OutboundMessage, create_bus
from channels.access.allow import AllowList
from channels.buttons import fit_buttons
from channels.errors import ChannelError, DeliveryError, FatalChannelError, RateLimited
from channels.health import HealthStatus
from channels.media_info import MEDIA_DETAILS
from channels.whatsapp import Verdict, WhatsAppChannel, check, graph_error, parse_notification
from channels.whatsapp.media import MAX_IMAGE_BYTES, media_kind
from config import WhatsAppConfig
from tests.channels.refusing_sender import RefusingSender, refused_then_taken
from tests.channels.started import (
    WebhookOnBus,
    once,
    receiving_webhooks,
    webhooks_started,
)
from tests.fakes.whatsapp_server import FakeWhatsApp, post_json

ALICE, MALLORY = "15550001111", "15550009999"
PATH = "/whatsapp/webhook"
WAIT_S = 10.0


def make_channel(
    fake: FakeWhatsApp, tmp_path: Path, *, token: str | None = None
) -> WhatsAppChannel:
    config = WhatsAppConfig.model_validate(
        {
            "access_token": token or fake.access_token,
            "phone_number_id": fake.phone_number_id,
            "app_secret": fake.app_secret,
            "verify_token": fake.verify_token,
            "api_base_url": fake.base_url,
        }
    )
    channel = WhatsAppChannel(config, data_dir=tmp_path)
    channel.allow = AllowList([ALICE])
    return channel


@dataclass
class Running(WebhookOnBus[FakeWhatsApp, WhatsAppChannel]):
    async def post(self, body: bytes) -> int:
        return (await post_json(self.url, body, self.fake.signed_headers(body)))[0]


@asynccontextmanager
async def run_whatsapp(fake: FakeWhatsApp, channel: WhatsAppChannel) -> AsyncIterator[Running]:
    """The channel receiving on a fresh bus, its webhook served; stopped on the way out."""
    async with receiving_webhooks(Running, fake, channel, PATH, name="whatsapp") as running:
        yield running


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    async with FakeWhatsApp() as fake, run_whatsapp(fake, make_channel(fake, tmp_path)) as running:
        yield running


def test_the_signature_is_an_hmac_of_the_raw_body() -> None:
    body = b'{"entry": []}'
    good = "sha256=" + __import__("hmac").new(b"s3cret", body, "sha256").hexdigest()
    assert check("s3cret", body, good) is Verdict.VALID
    assert check("s3cret", body, None) is Verdict.MISSING
    assert check("s3cret", body + b" ", good) is Verdict.WRONG
    assert check("other", body, good) is Verdict.WRONG
    assert check("s3cret", body, good.removeprefix("sha256=")) is Verdict.WRONG


def test_notifications_are_parsed_for_our_number_only() -> None:
    fake = FakeWhatsApp()
    payload = json.loads(fake.text_notification(ALICE, "hi", name="Alice A."))
    [parsed] = parse_notification(payload, fake.phone_number_id).messages
    message = parsed.message
    assert (message.sender_id, message.chat_id, message.content) == (ALICE, ALICE, "hi")
    assert message.metadata["profile_name"] == "Alice A."
    other = parse_notification(payload, "999")
    assert other.messages == ()
    assert other.foreign == 1
    statuses = parse_notification(
        json.loads(fake.status_notification("wamid.1", ALICE)), fake.phone_number_id
    )
    assert statuses.messages == ()
    assert statuses.statuses[0].status == "delivered"


def test_graph_error_codes_become_the_retry_policys_words() -> None:
    def error(code: int, status: int = 400) -> ChannelError:
        return graph_error(status, {"error": {"code": code, "message": "m"}}, "send")

    assert isinstance(error(130429), RateLimited)
    assert isinstance(error(131056), RateLimited)
    outside = error(131047)
    assert isinstance(outside, DeliveryError)
    assert outside.reason == "outside_window"
    assert type(error(190, 401)).__name__ == "TokenRejected"
    assert type(error(131000, 500)).__name__ == "TransientError"


async def test_the_handshake_echoes_the_challenge_only_for_the_right_token(
    running: Running,
) -> None:
    async with aiohttp.ClientSession() as http:

        async def verify(**query: str) -> tuple[int, str]:
            async with http.get(running.url, params=query) as answer:
                return answer.status, await answer.text()

        token = running.fake.verify_token
        assert await verify(
            **{"hub.mode": "subscribe", "hub.verify_token": token, "hub.challenge": "1158201444"}
        ) == (200, "1158201444")
        assert (
            await verify(
                **{"hub.mode": "subscribe", "hub.verify_token": "guess", "hub.challenge": "1"}
            )
        )[0] == 403
        assert (
            await verify(
                **{"hub.mode": "unsubscribe", "hub.verify_token": token, "hub.challenge": "1"}
            )
        )[0] == 403
        assert (await verify(**{"hub.challenge": "1"}))[0] == 403


async def test_a_signed_message_is_published_and_a_forged_one_refused(running: Running) -> None:
    fake = running.fake
    body = fake.text_notification(ALICE, "hello on whatsapp")
    assert (await post_json(running.url, body))[0] == 401
    assert (await post_json(running.url, body, fake.signed_headers(body, app_secret="x")))[0] == 403
    assert running.agent.inbound_depth() == 0
    assert await running.post(body) == 200
    message = await running.next_inbound()
    assert (message.channel, message.sender_id, message.chat_id) == ("whatsapp", ALICE, ALICE)
    assert message.content == "hello on whatsapp"
    assert message.message_id is not None
    assert message.message_id.startswith("wamid.")
    # Redelivered by Meta: answered 200, published once.
    assert await running.post(body) == 200
    assert await running.post(fake.status_notification("wamid.X", ALICE)) == 200
    stale = fake.text_notification(ALICE, "from last month", timestamp=time.time() - 30 * 86400)
    assert await running.post(stale) == 200
    assert await running.post(fake.text_notification(ALICE, "next")) == 200
    assert (await running.next_inbound()).content == "next"
    assert running.agent.inbound_depth() == 0


async def test_media_is_downloaded_for_allowed_senders_only(running: Running) -> None:
    fake = running.fake
    media_id = fake.host_media(b"\xff\xd8 fake jpeg", "image/jpeg")
    image = {"id": media_id, "mime_type": "image/jpeg", "caption": "look"}
    assert await running.post(fake.message_notification(ALICE, "image", image)) == 200
    message = await running.next_inbound()
    assert message.content == "look"
    [path] = message.media
    assert await asyncio.to_thread(Path(path).read_bytes) == b"\xff\xd8 fake jpeg"
    assert await running.post(fake.message_notification(MALLORY, "image", image)) == 200
    assert (await running.next_inbound()).media == []
    assert fake.media_downloads == [media_id]
    # A download that does not match the digest WhatsApp gave is not handed to the agent.
    corrupt = fake.host_media(b"\xff\xd8 another jpeg", "image/jpeg")
    fake.corrupt_media.add(corrupt)
    broken = {"id": corrupt, "mime_type": "image/jpeg", "caption": "broken"}
    assert await running.post(fake.message_notification(ALICE, "image", broken)) == 200
    damaged = await running.next_inbound()
    assert damaged.media == []
    assert damaged.content == (
        "broken\n[image, 15 bytes, not downloaded: the SHA-256 digest does not match]"
    )


async def test_a_photo_keeps_its_type_and_a_document_its_name(running: Running) -> None:
    fake = running.fake
    media_id = fake.host_media(b"%PDF-1.7", "application/pdf")
    document = {"id": media_id, "mime_type": "application/pdf", "filename": "plan.pdf"}
    await running.post(fake.message_notification(ALICE, "document", document))

    message = await running.next_inbound()

    [path] = message.media
    assert message.metadata[MEDIA_DETAILS][path] == {"name": "plan.pdf", "mime": "application/pdf"}


async def test_a_file_over_the_limit_is_named_and_not_downloaded(running: Running) -> None:
    running.channel.max_media_bytes = 10
    fake = running.fake
    media_id = fake.host_media(b"x" * 2048, "video/mp4")
    video = {"id": media_id, "mime_type": "video/mp4", "caption": "party"}
    await running.post(fake.message_notification(ALICE, "video", video))

    message = await running.next_inbound()

    assert message.media == []
    assert message.content == "party\n[video, 2 KB, not downloaded: larger than the 10 bytes limit]"
    assert fake.media_downloads == []


async def test_typing_marks_the_last_message_read_and_replies_are_text(
    running: Running, tmp_path: Path
) -> None:
    fake, channel = running.fake, running.channel
    assert await running.post(fake.text_notification(ALICE, "typing?")) == 200
    inbound = await running.next_inbound()
    await channel.send_typing(ALICE)
    await channel.send_typing(ALICE)  # renewed at most every 20 s
    assert [(r.message_id, r.typing) for r in fake.reads] == [(inbound.message_id, True)]
    wamid = await channel.send_with_id(
        OutboundMessage(channel="whatsapp", chat_id=ALICE, content="yes")
    )
    assert fake.texts_to(ALICE) == ["yes"]
    assert wamid == fake.sent[-1].wamid
    picture = tmp_path / "chart.png"
    picture.write_bytes(b"\x89PNG chart")
    await channel.send(
        OutboundMessage(channel="whatsapp", chat_id=ALICE, content="", media=[str(picture)])
    )
    sent = fake.sent[-1]
    assert sent.kind == "image"
    assert fake.uploads[sent.content["id"]][:2] == (b"\x89PNG chart", "chart.png")


async def test_a_reaction_is_a_reaction_message_and_an_empty_emoji_takes_it_back(
    running: Running,
) -> None:
    fake, channel = running.fake, running.channel
    assert await running.post(fake.text_notification(ALICE, "refund?")) == 200
    wamid = (await running.next_inbound()).message_id
    assert wamid is not None
    await channel.react_to_message(ALICE, wamid, "👀")
    await channel.remove_reaction(ALICE, wamid, "👀")
    assert [(s.to, s.kind, s.content) for s in fake.sent] == [
        (ALICE, "reaction", {"message_id": wamid, "emoji": "👀"}),
        (ALICE, "reaction", {"message_id": wamid, "emoji": ""}),
    ]


def reply_file(path: Path, data: bytes, mime: str, caption: str = "") -> Attachment:
    path.write_bytes(data)
    kind = "image" if mime.startswith("image/") else "file"
    digest = hashlib.sha256(data).hexdigest()
    return Attachment(
        kind=kind,
        mime=mime,
        name=path.name,
        size=len(data),
        sha256=digest,
        path=str(path),
        caption=caption,
    )


async def test_a_reply_file_is_uploaded_and_sent_by_its_media_id(
    running: Running, tmp_path: Path
) -> None:
    fake, channel = running.fake, running.channel
    chart = reply_file(tmp_path / "chart.png", b"\x89PNG chart", "image/png", caption="Q3")
    report = reply_file(tmp_path / "q3.pdf", b"%PDF-1.4 report", "application/pdf")
    sent_ids = [
        await channel.send_attachment(ALICE, file, reply_to=None, delivery_key=f"k{n}")
        for n, file in enumerate((chart, report))
    ]
    image, document = fake.sent[-2:]
    assert sent_ids == [image.wamid, document.wamid]
    assert (image.kind, image.content["caption"]) == ("image", "Q3")
    assert fake.uploads[image.content["id"]] == (b"\x89PNG chart", "chart.png", "image/png")
    assert (document.kind, document.content["filename"]) == ("document", "q3.pdf")
    assert fake.uploads[document.content["id"]][:2] == (b"%PDF-1.4 report", "q3.pdf")
    # Over an image's 5 MB, or of a type images do not take, a picture goes as a document.
    assert media_kind("image/png", MAX_IMAGE_BYTES + 1) == "document"
    assert media_kind("image/gif", 10) == "document"
    assert channel.max_attachment_bytes("image") == 100 * 1024 * 1024


async def test_send_failures_are_typed_and_a_dead_token_makes_the_channel_down(
    tmp_path: Path,
) -> None:
    async with FakeWhatsApp() as fake:
        # Leaving the block raises the fatal error `start()` ended with.
        with pytest.raises(FatalChannelError):
            async with run_whatsapp(fake, make_channel(fake, tmp_path)) as running:
                await fail_sends_then_the_token(running)


async def fail_sends_then_the_token(running: Running) -> None:
    fake, channel = running.fake, running.channel
    reply = OutboundMessage(channel="whatsapp", chat_id=ALICE, content="hi")
    fake.fail_next(131056)
    with pytest.raises(RateLimited):
        await channel.send(reply)
    fake.fail_next(131047)
    with pytest.raises(DeliveryError, match="131047"):
        await channel.send(reply)
    fake.fail_next(190)
    with pytest.raises(ChannelError, match="190"):
        await channel.send(reply)
    assert (await channel.health_check()).status is HealthStatus.DOWN
    # start() ends with the fatal error, so the supervisor marks the channel Down.
    await asyncio.wait({running.task}, timeout=WAIT_S)
    assert isinstance(running.task.exception(), FatalChannelError)


async def test_a_rejected_token_at_start_is_fatal(tmp_path: Path) -> None:
    async with FakeWhatsApp() as fake:
        channel = make_channel(fake, tmp_path, token="expired")
        _agent, publisher = create_bus(4)
        with pytest.raises(FatalChannelError):
            await asyncio.wait_for(channel.start(publisher.inbound_sender()), WAIT_S)
        assert (await channel.health_check()).status is HealthStatus.DOWN
        await channel.stop()


async def test_a_full_backlog_answers_429_with_retry_after_and_the_retry_is_taken(
    tmp_path: Path,
) -> None:
    async with FakeWhatsApp() as fake:
        channel = make_channel(fake, tmp_path)
        sender = RefusingSender(refusals=1)
        ready = once(channel.wait_receiving)
        async with (
            webhooks_started(channel, sender, ready, name="whatsapp") as (_task, origin),
            aiohttp.ClientSession() as http,
        ):
            body = fake.text_notification(ALICE, "busy?")
            headers = {**fake.signed_headers(body), "Content-Type": "application/json"}
            await refused_then_taken(http, origin + PATH, sender, data=body, headers=headers)
            assert [message.content for message in sender.taken] == ["busy?"]


def with_buttons(content: str, buttons: list[list[Button]]) -> OutboundMessage:
    return OutboundMessage(channel="whatsapp", chat_id=ALICE, content=content, buttons=buttons)


async def test_buttons_are_reply_buttons_and_a_tap_names_the_message_that_held_them(
    running: Running,
) -> None:
    fake, channel = running.fake, running.channel
    buttons = [
        [Button(text="Approve", data="refund:42:yes"), Button(text="Deny", data="refund:42:no")],
        [Button(text="Docs", url="https://example.com/refunds")],
    ]
    held = await channel.send_with_id(with_buttons("Approve the refund?", buttons))
    sent = fake.sent[-1]
    assert (sent.kind, sent.wamid) == ("interactive", held)
    assert sent.content["type"] == "button"
    assert sent.content["body"]["text"] == (
        "Approve the refund?\n\nDocs: https://example.com/refunds"
    )
    assert [b["reply"] for b in sent.content["action"]["buttons"]] == [
        {"id": "refund:42:yes", "title": "Approve"},
        {"id": "refund:42:no", "title": "Deny"},
    ]

    assert held is not None
    assert await running.post(fake.tap_notification(ALICE, held, "refund:42:no", "Deny")) == 200
    tapped = await running.next_inbound()
    assert tapped.content == "Deny"
    assert tapped.metadata[CALLBACK] == {"data": "refund:42:no", "message_id": held}
    assert REPLY_TO not in tapped.metadata


async def test_more_than_three_buttons_are_a_list_and_a_long_text_goes_first(
    running: Running,
) -> None:
    fake, channel = running.fake, running.channel
    choices = [Button(text=f"Option {n}", data=f"option:{n}") for n in range(12)]
    fitted = fit_buttons([choices], channel.button_limits, channel="whatsapp", warned=set())
    text = "word " * 300  # over an interactive body's 1,024 characters
    held = await channel.send_with_id(with_buttons(text, fitted))
    first, second = fake.sent[-2:]
    assert (first.kind, first.text) == ("text", text)
    assert (second.kind, second.wamid, second.content["type"]) == ("interactive", held, "list")
    rows = second.content["action"]["sections"][0]["rows"]
    assert [row["id"] for row in rows] == [f"option:{n}" for n in range(10)]

    assert held is not None
    assert await running.post(fake.tap_notification(ALICE, held, "option:3", "Option 3")) == 200
    tapped = await running.next_inbound()
    assert tapped.metadata[CALLBACK] == {"data": "option:3", "message_id": held}


async def test_a_reaction_to_a_bot_message_is_handed_over_once_and_a_removal_not(
    running: Running,
) -> None:
    fake, channel = running.fake, running.channel
    held = await channel.send_with_id(
        OutboundMessage(channel="whatsapp", chat_id=ALICE, content="The refund is done.")
    )
    assert held is not None
    wamid = fake.new_wamid()
    body = fake.reaction_notification(ALICE, held, "👍", wamid=wamid)
    assert await running.post(body) == 200
    assert await running.post(body) == 200  # Meta delivers it again: one reaction
    reaction = await running.next_inbound()
    assert (reaction.chat_id, reaction.sender_id, reaction.message_id) == (ALICE, ALICE, wamid)
    assert reaction.content == "[reaction 👍 to a message]"
    assert reaction.metadata[REACTION] == {"emoji": "👍", "message_id": held}
    assert CALLBACK not in reaction.metadata
    # Taken back: WhatsApp leaves the emoji out, and nothing is handed over.
    assert await running.post(fake.reaction_notification(ALICE, held, "")) == 200
    written = fake.new_wamid()
    assert await running.post(fake.text_notification(ALICE, "next", wamid=written)) == 200
    assert (await running.next_inbound()).content == "next"
    assert running.agent.inbound_depth() == 0
    # A reaction is no message to mark read: the typing indicator goes on the last one written.
    assert await running.post(fake.reaction_notification(ALICE, held, "🎉")) == 200
    assert REACTION in (await running.next_inbound()).metadata
    await channel.send_typing(ALICE)
    assert [read.message_id for read in fake.reads] == [written]


def test_a_reaction_taken_back_carries_no_reaction() -> None:
    fake = FakeWhatsApp()
    payload = json.loads(fake.reaction_notification(ALICE, "wamid.BOT", ""))
    [parsed] = parse_notification(payload, fake.phone_number_id).messages
    assert parsed.removed_reaction
    assert REACTION not in parsed.message.metadata
    payload = json.loads(fake.reaction_notification(ALICE, "wamid.BOT", "🎉"))
    [parsed] = parse_notification(payload, fake.phone_number_id).messages
    assert not parsed.removed_reaction
    assert parsed.message.metadata[REACTION] == {"emoji": "🎉", "message_id": "wamid.BOT"}
