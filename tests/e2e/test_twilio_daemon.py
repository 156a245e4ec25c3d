"""Twilio SMS end to end: the daemon subprocess, the twilio library, and the fake Twilio.

Twilio's webhooks are posted to the daemon's own HTTP server, signed as Twilio signs them for
the public URL the profile names (the daemon sits behind a proxy there, so it could not have
guessed that URL). Replies come back through the fake's Messages API.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import pytest
import pytest_asyncio

from tests.e2e.conftest import WAIT_S, running_daemon
from tests.e2e.long_text import assert_split_well, mixed_text
from tests.e2e.phone_bot import PhoneBot
from tests.e2e.webhook_attacks import Attack, WebhookRequest, WebhookSigner, post, standard_attacks
from tests.fakes.twilio_server import FakeTwilio, twilio_signature

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

PATH, QUIET_PATH = "/twilio/sms", "/twilio/quiet"
PUBLIC_URL = "https://sms.example.com/twilio/sms"
QUIET_URL = "https://sms.example.com/twilio/quiet"
#: Numbers allowed to text the bot: each test talks from one of its own.
ALLOWED = [f"+1555000{n:04d}" for n in range(1, 21)]
MALLORY, EVE = "+15550009999", "+15550008888"
SMS_LIMIT_CHARS = 1600


def twilio_profile(
    fake: FakeTwilio,
    *,
    path: str = PATH,
    public_url: str = PUBLIC_URL,
    stranger_notice: bool = True,
    delay_s: float = 0.0,
) -> str:
    allowed = ", ".join(f'"{number}"' for number in ALLOWED)
    return f"""\
queue_mode: followup
agent: {{type: echo, delay_s: {delay_s}, pieces: 2}}
channels:
  - type: twilio
    account_sid: {fake.account_sid}
    auth_token: "{fake.auth_token}"
    from_number: "{fake.number}"
    public_url: {public_url}
    webhook_path: {path}
    api_base_url: {fake.base_url}
    stranger_notice: {str(stranger_notice).lower()}
    allow: [{allowed}]
"""


def form_body(form: Mapping[str, list[str]]) -> bytes:
    return urlencode([(name, value) for name, values in form.items() for value in values]).encode()


def signer_for(fake: FakeTwilio, public_url: str = PUBLIC_URL) -> WebhookSigner:
    def sign(body: bytes, secret: str) -> dict[str, str]:
        params = parse_qs(body.decode(), keep_blank_values=True)
        return {"X-Twilio-Signature": twilio_signature(secret, public_url, params)}

    return WebhookSigner("application/x-www-form-urlencoded", sign, fake.auth_token)


@dataclass
class SmsBot(PhoneBot[FakeTwilio]):
    numbers: Iterator[str] = field(default_factory=lambda: iter(ALLOWED))
    path = PATH

    async def say(
        self,
        number: str,
        text: str,
        *,
        media: Sequence[tuple[str, str]] = (),
        opt_out_type: str | None = None,
    ) -> int:
        form = self.fake.webhook_form(number, text, media=media, opt_out_type=opt_out_type)
        return await post(self.url, signer_for(self.fake).genuine(form_body(form)))


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SmsBot]:
    directory = tmp_path_factory.mktemp("twilio")
    async with FakeTwilio() as fake:
        profiles = {
            "sms": twilio_profile(fake),
            "quiet": twilio_profile(
                fake, path=QUIET_PATH, public_url=QUIET_URL, stranger_notice=False
            ),
        }
        async with running_daemon(directory, profiles) as daemon:
            await fake.wait_until(lambda: len(fake.calls) >= 2, WAIT_S)  # both checked the account
            yield SmsBot(fake, daemon)


async def test_an_allowed_number_gets_the_echo_and_a_stranger_one_notice(bot: SmsBot) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    for text in ("let me in", "please?"):
        assert await bot.say(MALLORY, text) == 200
    assert await bot.say(alice, "hello by sms") == 200
    await fake.wait_until(lambda: fake.texts_to(alice) == ["hello by sms"], WAIT_S)
    await bot.barrier(alice)
    [notice] = fake.texts_to(MALLORY)
    assert MALLORY in notice
    refused = await bot.daemon.metric(
        "octos_messages_in_total", profile="sms", channel="twilio", outcome="refused"
    )
    assert refused == 2


async def test_strangers_cost_nothing_when_the_notice_is_off(bot: SmsBot) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    quiet = bot.daemon.http_url + QUIET_PATH
    signer = signer_for(fake, QUIET_URL)
    for sender, text in ((EVE, "who are you"), (alice, "quiet hello")):
        form = fake.webhook_form(sender, text)
        assert await post(quiet, signer.genuine(form_body(form))) == 200
    await fake.wait_until(lambda: fake.texts_to(alice) == ["quiet hello"], WAIT_S)
    assert fake.texts_to(EVE) == []
    assert bot.daemon.count_logged("twilio.stranger_ignored") == 1


async def test_a_long_mixed_reply_arrives_complete_within_the_sms_limit(bot: SmsBot) -> None:
    fake, alice, text = bot.fake, next(bot.numbers), mixed_text()
    assert await bot.say(alice, text) == 200
    await bot.barrier(alice)
    *chunks, _barrier = fake.texts_to(alice)
    assert len(chunks) >= len(text) // SMS_LIMIT_CHARS
    assert all(len(chunk) <= SMS_LIMIT_CHARS for chunk in chunks)
    assert_split_well(text, chunks, fences_shown=False)  # SMS shows code as plain lines
    assert not [chunk for chunk in chunks if "```" in chunk]


async def test_a_rate_limited_send_is_waited_out_and_delivered_once(bot: SmsBot) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    before = await bot.daemon.metric(
        "octos_send_retries_total", channel="twilio", reason="rate_limited"
    )
    statuses_before = len(fake.send_statuses())
    fake.rate_limit_next()
    assert await bot.say(alice, "patience, please") == 200
    await bot.barrier(alice)
    assert fake.texts_to(alice)[0] == "patience, please"
    assert len(fake.texts_to(alice)) == 2
    assert fake.send_statuses()[statuses_before:] == [429, 201, 201]
    after = await bot.daemon.metric(
        "octos_send_retries_total", channel="twilio", reason="rate_limited"
    )
    assert after == before + 1


async def test_carrier_keywords_are_twilios_never_answered_nor_taken_for_abort(
    bot: SmsBot,
) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    for keyword in ("STOP", "cancel", "HELP", "START"):
        assert await bot.say(alice, keyword) == 200
    assert await bot.say(alice, "arrêt", opt_out_type="STOP") == 200
    await bot.barrier(alice)
    assert len(fake.texts_to(alice)) == 1  # only the barrier's echo: no abort reply, no echo
    assert bot.daemon.count_logged("twilio.carrier_keyword") >= 5


def twilio_attacks(fake: FakeTwilio, sender: str) -> list[Attack]:
    signer = signer_for(fake)
    body = form_body(fake.webhook_form(sender, "forged hello"))
    other = form_body(fake.webhook_form(sender, "the signed text"))
    # Stale: a signature Twilio made for the URL the number used to have.
    stale = signer_for(fake, "https://old-host.example.com/twilio/sms").genuine(body)
    return [*standard_attacks(signer, body, other), Attack("stale-url", stale)]


async def test_forged_unsigned_tampered_and_stale_webhooks_are_refused(bot: SmsBot) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    accepted = await bot.daemon.metric("octos_messages_in_total", profile="sms", outcome="accepted")
    for attack in twilio_attacks(fake, alice):
        assert await post(bot.url, attack.request) in attack.refused, attack.name
    await bot.barrier(alice)
    assert fake.texts_to(alice) == [fake.texts_to(alice)[-1]]  # the barrier's echo alone
    after = await bot.daemon.metric("octos_messages_in_total", profile="sms", outcome="accepted")
    assert after == accepted + 1


async def test_a_redelivered_message_sid_is_answered_once(bot: SmsBot) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    request = signer_for(fake).genuine(form_body(fake.webhook_form(alice, "only once")))
    assert await post(bot.url, request) == 200
    await fake.wait_until(lambda: fake.texts_to(alice) == ["only once"], WAIT_S)
    assert await post(bot.url, request) == 200
    await bot.barrier(alice)
    assert fake.texts_to(alice)[:-1] == ["only once"]


async def test_mms_media_reaches_the_agent_and_an_empty_body_is_still_answered(
    bot: SmsBot,
) -> None:
    fake, alice = bot.fake, next(bot.numbers)
    url = fake.host_media(b"\xff\xd8 a photo", "image/jpeg")
    assert await bot.say(alice, "see attached", media=[(url, "image/jpeg")]) == 200
    await fake.wait_until(lambda: fake.texts_to(alice) == ["see attached"], WAIT_S)
    assert len(fake.media_fetches) >= 1
    saved = list((bot.daemon.config.parent / "data" / "sms" / "media" / "twilio").rglob("*.jpg"))
    assert [path.read_bytes() for path in saved] == [b"\xff\xd8 a photo"]


# On the write-ahead log: a message acknowledged to Twilio survives the daemon.


async def test_an_acknowledged_sms_survives_a_sigkill_and_is_answered_once(
    tmp_path: Path,
) -> None:
    alice = ALLOWED[-1]
    async with FakeTwilio() as fake:
        slow = {"sms": twilio_profile(fake, delay_s=3.0)}
        async with running_daemon(tmp_path, slow) as daemon:
            await fake.wait_until(lambda: fake.calls, WAIT_S)
            form = fake.webhook_form(alice, "survive this")
            request = signer_for(fake).genuine(form_body(form))
            assert await post(daemon.http_url + PATH, request) == 200
            daemon.signal(signal.SIGKILL)
            await daemon.wait(WAIT_S)
        assert fake.texts_to(alice) == []
        async with running_daemon(tmp_path, slow) as daemon:
            await fake.wait_until(lambda: fake.texts_to(alice), WAIT_S)
            bot = SmsBot(fake, daemon)
            await bot.barrier(alice)
            assert fake.texts_to(alice)[:-1] == ["survive this"]
            assert await daemon.stop_cleanly() == 0


async def test_a_webhook_replayed_after_a_restart_is_recognised(tmp_path: Path) -> None:
    alice = ALLOWED[-2]
    async with FakeTwilio() as fake:
        profiles = {"sms": twilio_profile(fake)}
        request: WebhookRequest | None = None
        async with running_daemon(tmp_path, profiles) as daemon:
            await fake.wait_until(lambda: fake.calls, WAIT_S)
            request = signer_for(fake).genuine(form_body(fake.webhook_form(alice, "once only")))
            assert await post(daemon.http_url + PATH, request) == 200
            await fake.wait_until(lambda: fake.texts_to(alice) == ["once only"], WAIT_S)
            assert await daemon.stop_cleanly() == 0
        async with running_daemon(tmp_path, profiles) as daemon:
            await fake.wait_until(lambda: len(fake.calls) >= 3, WAIT_S)
            assert await post(daemon.http_url + PATH, request) == 200
            await SmsBot(fake, daemon).barrier(alice)
            assert fake.texts_to(alice)[:-1] == ["once only"]
