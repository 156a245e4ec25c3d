"""The Twilio channel in process: the real twilio library against the fake Twilio, and its
webhook route served by a local aiohttp server, as the daemon serves it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from bus import OutboundMessage, create_bus
from channels.access.allow import AllowList
from channels.errors import AuthError, ChannelError, FatalChannelError, RateLimited
from channels.health import HealthStatus
from channels.media_info import MEDIA_DETAILS
from channels.registry import ChannelContext, ChannelUnavailable, build_channel
from channels.twilio import TwilioChannel, TwilioSignature, Verdict, parse_sms
from config import TwilioConfig
from tests.channels.refusing_sender import RefusingSender, refused_then_taken
from tests.channels.started import (
    WebhookOnBus,
    once,
    receiving_webhooks,
    webhooks_started,
)
from tests.fakes.twilio_server import FakeTwilio, post_form, twilio_signature

ALICE, MALLORY = "+15550001111", "+15550009999"
PUBLIC_URL = "https://sms.example.com/twilio/sms"
WAIT_S = 10.0


def twilio_config(fake: FakeTwilio, **fields: object) -> TwilioConfig:
    return TwilioConfig.model_validate(
        {
            "account_sid": fake.account_sid,
            "auth_token": fake.auth_token,
            "public_url": PUBLIC_URL,
            "from_number": fake.number,
            "api_base_url": fake.base_url,
            **fields,
        }
    )


def make_channel(fake: FakeTwilio, tmp_path: Path, **fields: object) -> TwilioChannel:
    channel = TwilioChannel(twilio_config(fake, **fields), data_dir=tmp_path)
    channel.allow = AllowList([ALICE])
    return channel


@dataclass
class Running(WebhookOnBus[FakeTwilio, TwilioChannel]):
    async def post(self, form: dict[str, list[str]]) -> tuple[int, str, str]:
        return await post_form(self.url, form, self.fake.signed_headers(PUBLIC_URL, form))


@asynccontextmanager
async def run_twilio(fake: FakeTwilio, channel: TwilioChannel) -> AsyncIterator[Running]:
    """The channel receiving on a fresh bus, its webhook served; stopped on the way out."""
    async with receiving_webhooks(Running, fake, channel, "/twilio/sms", name="twilio") as running:
        yield running


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    async with FakeTwilio() as fake, run_twilio(fake, make_channel(fake, tmp_path)) as running:
        yield running


def test_the_signature_is_twilios_and_covers_the_url_and_every_parameter() -> None:
    token = "secret-token"
    signature = TwilioSignature(token, PUBLIC_URL)
    form = {"Body": ["hi"], "From": [ALICE], "MessageSid": ["SM1"]}
    good = twilio_signature(token, PUBLIC_URL, form)
    assert signature.check(form, good) is Verdict.VALID
    # Twilio sometimes signs the URL with its port: accepted too.
    with_port = twilio_signature(token, "https://sms.example.com:443/twilio/sms", form)
    assert signature.check(form, with_port) is Verdict.VALID
    assert signature.check(form, None) is Verdict.MISSING
    assert signature.check(form, "") is Verdict.MISSING
    assert signature.check({**form, "Body": ["hi!"]}, good) is Verdict.WRONG
    assert signature.check(form, twilio_signature("other", PUBLIC_URL, form)) is Verdict.WRONG
    with_overrides = TwilioSignature(token, PUBLIC_URL + "#rc=3&rp=all")
    assert with_overrides.check(form, good) is Verdict.VALID
    other_url = twilio_signature(token, "https://old.example.com/twilio/sms", form)
    assert signature.check(form, other_url) is Verdict.WRONG


def test_parsing_finds_media_and_carrier_keywords() -> None:
    form = {
        "MessageSid": ["MM1"],
        "From": [ALICE],
        "Body": ["  stop "],
        "NumMedia": ["2"],
        "MediaUrl0": ["https://x/0"],
        "MediaContentType0": ["image/jpeg"],
        "MediaUrl1": ["https://x/1"],
    }
    sms = parse_sms(form)
    assert sms.media_urls == ("https://x/0", "https://x/1")
    assert sms.is_carrier_keyword
    assert not parse_sms({**form, "Body": ["stop the music"]}).is_carrier_keyword
    assert parse_sms({**form, "Body": ["arrêt"], "OptOutType": ["STOP"]}).is_carrier_keyword


async def test_a_signed_sms_is_published_then_answered_with_empty_twiml(running: Running) -> None:
    form = running.fake.webhook_form(ALICE, "hello by sms")
    status, content_type, body = await running.post(form)
    assert (status, content_type) == (200, "text/xml")
    assert "<Response" in body
    assert "<Message" not in body
    message = await running.next_inbound()
    assert (message.channel, message.sender_id, message.chat_id) == ("twilio", ALICE, ALICE)
    assert message.content == "hello by sms"
    assert message.message_id == form["MessageSid"][0]


async def test_unsigned_and_forged_requests_are_refused_before_anything_is_published(
    running: Running,
) -> None:
    form = running.fake.webhook_form(ALICE, "forged")
    assert (await post_form(running.url, form))[0] == 401
    forged = running.fake.signed_headers(PUBLIC_URL, form, auth_token="not-the-token")
    assert (await post_form(running.url, form, forged))[0] == 403
    # Signed for another body: a parameter changed after signing.
    signed = running.fake.signed_headers(PUBLIC_URL, form)
    assert (await post_form(running.url, {**form, "Body": ["changed"]}, signed))[0] == 403
    assert running.agent.inbound_depth() == 0


async def test_carrier_keywords_are_acknowledged_and_never_reach_the_gateway(
    running: Running,
) -> None:
    for text in ("STOP", "unsubscribe", "Cancel", "HELP", "start"):
        assert (await running.post(running.fake.webhook_form(ALICE, text)))[0] == 200
    assert (await running.post(running.fake.webhook_form(ALICE, "after the keywords")))[0] == 200
    message = await running.next_inbound()
    assert message.content == "after the keywords"
    assert running.agent.inbound_depth() == 0


async def test_mms_media_is_downloaded_with_basic_auth_for_allowed_senders_only(
    running: Running,
) -> None:
    fake = running.fake
    url = fake.host_media(b"\x89PNG fake image", "image/png")
    assert (await running.post(fake.webhook_form(ALICE, "a photo", media=[(url, "image/png")])))[
        0
    ] == 200
    message = await running.next_inbound()
    [path] = message.media
    assert await asyncio.to_thread(Path(path).read_bytes) == b"\x89PNG fake image"
    assert path.endswith(".png")
    stranger = fake.webhook_form(MALLORY, "mine too", media=[(url, "image/png")])
    assert (await running.post(stranger))[0] == 200
    from_stranger = await running.next_inbound()
    assert from_stranger.sender_id == MALLORY
    assert from_stranger.media == []
    assert len(fake.media_fetches) == 1


async def test_a_redelivered_message_sid_is_published_once(running: Running) -> None:
    form = running.fake.webhook_form(ALICE, "once")
    assert (await running.post(form))[0] == 200
    assert (await running.post(form))[0] == 200
    assert (await running.post(running.fake.webhook_form(ALICE, "twice")))[0] == 200
    assert [(await running.next_inbound()).content for _ in range(2)] == ["once", "twice"]


async def test_strangers_can_be_ignored_silently(tmp_path: Path) -> None:
    async with FakeTwilio() as fake:
        channel = make_channel(fake, tmp_path, stranger_notice=False)
        async with run_twilio(fake, channel) as running:
            for sender, text in ((MALLORY, "let me in"), (ALICE, "hi")):
                assert (await running.post(fake.webhook_form(sender, text)))[0] == 200
            message = await running.next_inbound()
            assert message.sender_id == ALICE
            assert running.queued_inbound() == 0


async def test_sends_go_through_the_messages_api_and_failures_are_typed(
    running: Running,
) -> None:
    fake, channel = running.fake, running.channel
    await channel.send(OutboundMessage(channel="twilio", chat_id=ALICE, content="a reply"))
    assert fake.texts_to(ALICE) == ["a reply"]
    assert fake.sent[0].sender == fake.number
    fake.rate_limit_next()
    with pytest.raises(RateLimited) as limited:
        await channel.send(OutboundMessage(channel="twilio", chat_id=ALICE, content="later"))
    assert limited.value.retry_after_s == 1.0
    fake.rate_limit_next(retry_after_s=3)
    with pytest.raises(RateLimited) as told:
        await channel.send(OutboundMessage(channel="twilio", chat_id=ALICE, content="later"))
    assert told.value.retry_after_s == 3.0
    with pytest.raises(ChannelError, match="21211"):
        await channel.send(OutboundMessage(channel="twilio", chat_id="not-a-number", content="x"))
    assert "Fake Twilio account" in (await channel.probe() or "")


async def test_a_refused_auth_token_makes_the_channel_down(tmp_path: Path) -> None:
    async with FakeTwilio() as fake:
        channel = make_channel(fake, tmp_path, auth_token="wrong-token")
        with pytest.raises(AuthError):
            await channel.probe()
        agent, publisher = create_bus(4)
        with pytest.raises(FatalChannelError):
            await asyncio.wait_for(channel.start(publisher.inbound_sender()), WAIT_S)
        assert (await channel.health_check()).status is HealthStatus.DOWN
        await channel.stop()
        assert agent.inbound_depth() == 0


async def test_a_full_backlog_answers_429_with_retry_after_and_the_retry_is_taken(
    tmp_path: Path,
) -> None:
    async with FakeTwilio() as fake:
        channel = make_channel(fake, tmp_path)
        sender = RefusingSender(refusals=1)
        ready = once(channel.wait_receiving)
        async with (
            webhooks_started(channel, sender, ready, name="twilio") as (_task, origin),
            aiohttp.ClientSession() as http,
        ):
            form = fake.webhook_form(ALICE, "busy?")
            fields = [(name, value) for name, values in form.items() for value in values]
            headers = fake.signed_headers(PUBLIC_URL, form)
            url = origin + "/twilio/sms"
            await refused_then_taken(http, url, sender, data=fields, headers=headers)
            assert [message.content for message in sender.taken] == ["busy?"]


async def test_a_token_revoked_while_running_makes_the_channel_down(tmp_path: Path) -> None:
    async with FakeTwilio() as fake:
        # Leaving the block raises the fatal error `start()` ended with.
        with pytest.raises(FatalChannelError):
            async with run_twilio(fake, make_channel(fake, tmp_path)) as running:
                await revoke_the_token_and_send(running)


async def revoke_the_token_and_send(running: Running) -> None:
    running.fake.auth_token = "rotated-elsewhere"
    with pytest.raises(AuthError):
        await running.channel.send(OutboundMessage(channel="twilio", chat_id=ALICE, content="x"))
    assert (await running.channel.health_check()).status is HealthStatus.DOWN
    await asyncio.wait({running.task}, timeout=WAIT_S)
    assert isinstance(running.task.exception(), FatalChannelError)


async def test_replies_can_come_from_a_messaging_service(tmp_path: Path) -> None:
    service = "MG" + "ab" * 16
    async with FakeTwilio() as fake:
        config = twilio_config(fake, from_number=None, messaging_service_sid=service)
        channel = TwilioChannel(config, data_dir=tmp_path)
        await channel.send(OutboundMessage(channel="twilio", chat_id=ALICE, content="hi"))
        await channel.stop()
    assert [(sent.sender, sent.body) for sent in fake.sent] == [(service, "hi")]


async def test_media_elsewhere_is_fetched_without_the_credentials(running: Running) -> None:
    fake = running.fake
    # The same fake under another origin name: Twilio's credentials must not go there.
    elsewhere = fake.host_media(b"x", "image/png").replace("127.0.0.1", "localhost")
    form = fake.webhook_form(ALICE, "from a CDN", media=[(elsewhere, "image/png")])
    assert (await running.post(form))[0] == 200
    message = await running.next_inbound()
    assert message.media == []  # the fake refused it (401): no credentials were sent
    assert len(fake.media_fetches) == 1


def test_without_the_twilio_library_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in list(sys.modules):
        if name == "twilio" or name.startswith(("twilio.", "channels.twilio")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "twilio", None)  # import twilio -> ModuleNotFoundError
    config = TwilioConfig(
        account_sid="AC" + "0" * 32,
        auth_token="t",
        from_number="+15005550006",
        public_url=PUBLIC_URL,
    )
    with pytest.raises(ChannelUnavailable, match=r"pip install 'octos-gateway\[twilio\]'"):
        build_channel(config, ChannelContext("p", tmp_path))


async def test_an_mms_photo_keeps_its_content_type(running: Running) -> None:
    fake = running.fake
    url = fake.host_media(b"\xff\xd8\xff fake jpeg", "image/jpeg")
    await running.post(fake.webhook_form(ALICE, "", media=[(url, "image/jpeg")]))

    message = await running.next_inbound()

    [path] = message.media
    assert message.metadata[MEDIA_DETAILS][path] == {"mime": "image/jpeg"}


async def test_mms_media_over_the_limit_is_named_and_not_kept(
    running: Running, tmp_path: Path
) -> None:
    running.channel.max_media_bytes = 1000
    fake = running.fake
    url = fake.host_media(b"x" * 5000, "video/mp4")
    await running.post(fake.webhook_form(ALICE, "look", media=[(url, "video/mp4")]))

    message = await running.next_inbound()

    assert message.media == []
    # MMS states no size: the download stops at the limit.
    assert message.content == "look\n[video, not downloaded: larger than the 1000 bytes limit]"
    assert list((tmp_path / "media").rglob("*.mp4")) == []
