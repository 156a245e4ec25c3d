"""WhatsApp Cloud API end to end: the daemon subprocess, its Graph client, and the fake API.

Meta's webhooks (the verification handshake and signed notifications) are sent to the daemon's
own HTTP server; replies, read receipts and typing indicators come back to the fake Graph API.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from tests.e2e.conftest import WAIT_S, running_daemon
from tests.e2e.long_text import assert_split_well, mixed_text
from tests.e2e.phone_bot import PhoneBot
from tests.e2e.webhook_attacks import Attack, WebhookSigner, post, standard_attacks
from tests.fakes.whatsapp_server import FakeWhatsApp, hub_signature
from tests.support.daemon import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

PATH = "/whatsapp/webhook"
ALLOWED = [f"1555000{n:04d}" for n in range(1, 21)]
MALLORY = "15550009999"
WHATSAPP_LIMIT_CHARS = 4096


def whatsapp_profile(fake: FakeWhatsApp, *, delay_s: float = 0.0) -> str:
    return f"""\
queue_mode: followup
agent: {{type: echo, delay_s: {delay_s}, pieces: 2}}
channels:
  - type: whatsapp
    access_token: "{fake.access_token}"
    phone_number_id: "{fake.phone_number_id}"
    app_secret: "{fake.app_secret}"
    verify_token: "{fake.verify_token}"
    api_base_url: {fake.base_url}
    allow: [{", ".join(ALLOWED)}]
"""


def signer_for(fake: FakeWhatsApp) -> WebhookSigner:
    def sign(body: bytes, secret: str) -> dict[str, str]:
        return {"X-Hub-Signature-256": hub_signature(secret, body)}

    return WebhookSigner("application/json", sign, fake.app_secret)


@dataclass
class WhatsAppBot(PhoneBot[FakeWhatsApp]):
    numbers: Iterator[str] = field(default_factory=lambda: iter(ALLOWED))
    path = PATH

    async def notify(self, body: bytes) -> int:
        return await post(self.url, signer_for(self.fake).genuine(body))

    async def say(self, number: str, text: str) -> int:
        return await self.notify(self.fake.text_notification(number, text))


async def account_checked(fake: FakeWhatsApp, daemon: DaemonProcess) -> None:
    await daemon.wait_log(lambda event: event.get("event") == "whatsapp.receiving")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WhatsAppBot]:
    directory = tmp_path_factory.mktemp("whatsapp")
    async with (
        FakeWhatsApp() as fake,
        running_daemon(directory, {"wa": whatsapp_profile(fake)}) as daemon,
    ):
        await account_checked(fake, daemon)
        yield WhatsAppBot(fake, daemon)


async def test_the_handshake_answers_only_the_right_token(bot: WhatsAppBot) -> None:
    async def verify(token: str, mode: str = "subscribe") -> tuple[int, str]:
        query = {"hub.mode": mode, "hub.verify_token": token, "hub.challenge": "1158201444"}
        async with aiohttp.ClientSession() as http, http.get(bot.url, params=query) as answer:
            return answer.status, await answer.text()

    assert await verify(bot.fake.verify_token) == (200, "1158201444")
    assert (await verify("a-guess"))[0] == 403
    assert (await verify(""))[0] == 403
    assert (await verify(bot.fake.verify_token, mode="unsubscribe"))[0] == 403


async def test_an_allowed_number_gets_the_echo_a_stranger_one_notice(bot: WhatsAppBot) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    for text in ("let me in", "please?"):
        assert await bot.say(MALLORY, text) == 200
    assert await bot.say(alice, "hello on whatsapp") == 200
    await fake.wait_until(lambda: fake.texts_to(alice) == ["hello on whatsapp"], WAIT_S)
    await bot.barrier(alice)
    [notice] = fake.texts_to(MALLORY)
    assert MALLORY in notice
    refused = await bot.daemon.metric(
        "octos_messages_in_total", profile="wa", channel="whatsapp", outcome="refused"
    )
    assert refused == 2
    # While the turn ran, Alice's message was marked read with the typing indicator.
    assert any(read.typing for read in fake.reads)


async def test_a_long_mixed_reply_arrives_complete_within_the_limit(bot: WhatsAppBot) -> None:
    fake, alice, text = bot.fake, next(bot.numbers), mixed_text()
    assert await bot.say(alice, text) == 200
    await bot.barrier(alice)
    *chunks, _barrier = fake.texts_to(alice)
    assert all(len(chunk) <= WHATSAPP_LIMIT_CHARS for chunk in chunks)
    assert_split_well(text, chunks, fences_shown=True)


async def test_markdown_arrives_in_whatsapps_markup(bot: WhatsAppBot) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    assert await bot.say(alice, "**Done**: see [the docs](https://docs.example.com)") == 200
    await fake.wait_until(lambda: fake.texts_to(alice), WAIT_S)
    assert fake.texts_to(alice) == ["*Done*: see the docs (https://docs.example.com)"]


async def test_a_throughput_limit_is_waited_out_and_the_reply_delivered_once(
    bot: WhatsAppBot,
) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    before = await bot.daemon.metric(
        "octos_send_retries_total", channel="whatsapp", reason="rate_limited"
    )
    results_before = len(fake.send_results)
    fake.fail_next(130429)
    assert await bot.say(alice, "patience, please") == 200
    await bot.barrier(alice)
    assert fake.texts_to(alice) == ["patience, please", fake.texts_to(alice)[-1]]
    assert fake.send_results[results_before:] == [(400, 130429), (200, None), (200, None)]
    after = await bot.daemon.metric(
        "octos_send_retries_total", channel="whatsapp", reason="rate_limited"
    )
    assert after == before + 1


async def test_outside_the_24_hour_window_is_one_log_line_and_a_metric(bot: WhatsAppBot) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    results_before = len(fake.send_results)
    fake.fail_next(131047)
    assert await bot.say(alice, "too late") == 200
    await bot.barrier(alice)
    assert fake.send_results[results_before:] == [(400, 131047), (200, None)]  # not retried
    assert bot.daemon.count_logged("whatsapp.outside_24h_window") == 1
    failures = await bot.daemon.metric(
        "octos_send_errors_total", channel="whatsapp", reason="outside_window"
    )
    assert failures == 1


async def test_statuses_are_never_answered(bot: WhatsAppBot) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    sent_before = len(fake.sent)
    for status in ("sent", "delivered", "read", "failed"):
        assert await bot.notify(fake.status_notification(fake.new_wamid(), alice, status)) == 200
    await bot.barrier(alice)
    assert len(fake.sent) == sent_before + 1  # the barrier's echo alone


def whatsapp_attacks(fake: FakeWhatsApp, sender: str) -> list[Attack]:
    body = fake.text_notification(sender, "forged hello")
    other = fake.text_notification(sender, "the signed text")
    return standard_attacks(signer_for(fake), body, other)


async def test_forged_unsigned_and_tampered_webhooks_are_refused_and_stale_ones_dropped(
    bot: WhatsAppBot,
) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    accepted = await bot.daemon.metric("octos_messages_in_total", profile="wa", outcome="accepted")
    for attack in whatsapp_attacks(fake, alice):
        assert await post(bot.url, attack.request) in attack.refused, attack.name
    # Stale: genuinely signed, but older than Meta's 7-day retry window: a replay, dropped.
    stale = fake.text_notification(alice, "from last month", timestamp=time.time() - 30 * 86400)
    assert await bot.notify(stale) == 200
    await bot.barrier(alice)
    assert len(fake.texts_to(alice)) == 1  # the barrier's echo alone
    after = await bot.daemon.metric("octos_messages_in_total", profile="wa", outcome="accepted")
    assert after == accepted + 1
    assert bot.daemon.count_logged("whatsapp.stale_message_dropped") == 1


async def test_a_redelivered_notification_is_answered_once(bot: WhatsAppBot) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    body = fake.text_notification(alice, "only once")
    assert await bot.notify(body) == 200
    await fake.wait_until(lambda: fake.texts_to(alice) == ["only once"], WAIT_S)
    assert await bot.notify(body) == 200
    await bot.barrier(alice)
    assert fake.texts_to(alice)[:-1] == ["only once"]


async def test_media_reaches_the_agent(bot: WhatsAppBot) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    media_id = fake.host_media(b"\xff\xd8 a photo", "image/jpeg")
    image = {"id": media_id, "mime_type": "image/jpeg", "caption": "see attached"}
    assert await bot.notify(fake.message_notification(alice, "image", image)) == 200
    await fake.wait_until(lambda: fake.texts_to(alice) == ["see attached"], WAIT_S)
    assert fake.media_downloads == [media_id]
    media_dir = bot.daemon.config.parent / "data" / "wa" / "media" / "whatsapp"
    assert [path.read_bytes() for path in media_dir.rglob("*.jpg")] == [b"\xff\xd8 a photo"]


async def test_a_rejected_token_marks_the_channel_down(tmp_path: Path) -> None:
    alice = ALLOWED[-3]
    async with (
        FakeWhatsApp() as fake,
        running_daemon(tmp_path, {"wa": whatsapp_profile(fake)}) as daemon,
    ):
        await account_checked(fake, daemon)
        fake.access_token = "rotated-elsewhere"  # the daemon's token no longer works
        assert await WhatsAppBot(fake, daemon).say(alice, "anyone?") == 200
        await daemon.wait_log(lambda event: event.get("event") == "delivery.failed")
        down = await daemon.wait_log(lambda event: event.get("event") == "channel.down")
        assert down["channel"] == "whatsapp"
        status, body = await daemon.get("/readyz")
        assert status == 503, body
        assert "access token" in body


async def test_each_message_is_marked_read_with_the_typing_indicator_once(
    tmp_path: Path,
) -> None:
    # A turn starts while its message is still being written to the journal, before the
    # webhook's hand-over returns: the channel must already know which message to mark read.
    alice = ALLOWED[-4]
    async with (
        FakeWhatsApp() as fake,
        running_daemon(tmp_path, {"wa": whatsapp_profile(fake, delay_s=0.5)}) as daemon,
    ):
        await account_checked(fake, daemon)
        bot = WhatsAppBot(fake, daemon)
        wamids = [fake.new_wamid() for _ in range(3)]
        for n, wamid in enumerate(wamids):
            text = f"read {n}"
            assert await bot.notify(fake.text_notification(alice, text, wamid=wamid)) == 200
            await fake.wait_until(partial(read_and_answered, fake, alice, wamid, text), WAIT_S)
        await bot.barrier(alice)
        # One POST /messages each: {"status": "read", "message_id": <wamid>,
        # "typing_indicator": {"type": "text"}}.
        assert [(r.message_id, r.typing) for r in fake.reads if r.message_id in wamids] == [
            (wamid, True) for wamid in wamids
        ]


def read_and_answered(fake: FakeWhatsApp, number: str, wamid: str, text: str) -> bool:
    return wamid in [read.message_id for read in fake.reads] and text in fake.texts_to(number)


async def test_ready_once_signed_webhooks_are_taken_even_while_the_token_is_checked(
    tmp_path: Path,
) -> None:
    alice = ALLOWED[-5]
    async with FakeWhatsApp() as fake:
        fake.hold_lookups = True  # the channel's token check waits until released
        async with running_daemon(tmp_path, {"wa": whatsapp_profile(fake)}) as daemon:
            await fake.control.holding.wait()
            status, body = await daemon.get("/readyz")
            assert status == 200, body
            bot = WhatsAppBot(fake, daemon)
            assert await bot.say(alice, "early bird") == 200
            await fake.wait_until(lambda: fake.texts_to(alice) == ["early bird"], WAIT_S)
            assert not fake.control.release.is_set()  # all while the check was held
            fake.control.release.set()
            await account_checked(fake, daemon)
            await bot.barrier(alice)
            assert fake.texts_to(alice)[:-1] == ["early bird"]
            assert await daemon.stop_cleanly() == 0


# On the write-ahead log: a message acknowledged to Meta survives the daemon.


async def test_an_acknowledged_message_survives_a_sigkill_and_is_answered_once(
    tmp_path: Path,
) -> None:
    alice = ALLOWED[-1]
    async with FakeWhatsApp() as fake:
        slow = {"wa": whatsapp_profile(fake, delay_s=3.0)}
        async with running_daemon(tmp_path, slow) as daemon:
            await account_checked(fake, daemon)
            assert await WhatsAppBot(fake, daemon).say(alice, "survive this") == 200
            daemon.signal(signal.SIGKILL)
            await daemon.wait(WAIT_S)
        assert fake.texts_to(alice) == []
        async with running_daemon(tmp_path, slow) as daemon:
            await fake.wait_until(lambda: fake.texts_to(alice), WAIT_S)
            await WhatsAppBot(fake, daemon).barrier(alice)
            assert fake.texts_to(alice)[:-1] == ["survive this"]
            assert await daemon.stop_cleanly() == 0


async def test_a_webhook_replayed_after_a_restart_is_recognised(tmp_path: Path) -> None:
    alice = ALLOWED[-2]
    async with FakeWhatsApp() as fake:
        profiles = {"wa": whatsapp_profile(fake)}
        body = fake.text_notification(alice, "once only")
        async with running_daemon(tmp_path, profiles) as daemon:
            await account_checked(fake, daemon)
            assert await WhatsAppBot(fake, daemon).notify(body) == 200
            await fake.wait_until(lambda: fake.texts_to(alice) == ["once only"], WAIT_S)
            assert await daemon.stop_cleanly() == 0
        async with running_daemon(tmp_path, profiles) as daemon:
            await account_checked(fake, daemon)
            bot = WhatsAppBot(fake, daemon)
            assert await bot.notify(body) == 200
            await bot.barrier(alice)
            assert fake.texts_to(alice)[:-1] == ["once only"]
