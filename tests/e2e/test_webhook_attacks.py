"""Every platform webhook under the shared attack corpus, through one daemon subprocess.

One daemon runs a profile per webhook channel (Twilio, WhatsApp, LINE, Feishu in webhook mode,
WeCom, QQ bot), each against its fake (`tests/e2e/webhook_platforms.py`). Over each route (and
the verification GETs of WhatsApp and WeCom) run the fixed corpus and a bounded random corpus
(`tests/support/attack_corpus.py`). Then, per platform, forged, unsigned, re-bodied and stale
requests carrying a real message publish nothing (`octos_messages_in_total` and the fake's
replies), and the same message genuinely signed is answered: so the signer is right, and the
refusals are the signature check's.

"Stale" where the signature covers a time (Feishu, WeCom, QQ): signed an hour ago (the corpus)
or an hour ahead. Where it covers none: Twilio, a signature made for the URL the number used
to have; LINE, an event timestamped two days ago (401); WhatsApp, a notification of a message
thirty days old, past the 7 days the channel answers (acknowledged 200 so Meta stops retrying,
and dropped). A replay of a fresh request is the gateway's durable dedup's (each platform's own
daemon tests check it), not the signature's.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from channels.base import Channel
from channels.registry import CHANNEL_TYPES
from tests.e2e import webhook_platforms as platforms
from tests.e2e.conftest import WAIT_S, running_daemon
from tests.e2e.webhook_platforms import USERS, Fakes, Platform
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.line_server import FakeLine
from tests.fakes.qq_server import FakeQQ
from tests.fakes.twilio_server import FakeTwilio
from tests.fakes.wecom_server import FakeWeCom
from tests.fakes.whatsapp_server import FakeWhatsApp
from tests.support.attack_corpus import (
    REFUSED,
    Route,
    fixed_cases,
    run_fixed_corpus,
    run_random_corpus,
    send,
)
from tests.support.daemon import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

RANDOM_EXAMPLES = 25
#: The corpus cases that carry a real message without a valid signature.
FORGERIES = (
    "forged signature",
    "missing signature",
    "non-ascii signature",
    "signature of another body",
    "stale signature",
)
PLATFORMS = ("twilio", "whatsapp", "line", "feishu", "wecom", "qq")
#: The registry's type of a platform here, where it is not the platform's name.
REGISTERED_AS = {"qq": "qq-bot"}
#: Types whose webhooks `tests/e2e/test_http_attacks.py` attacks, in its daemon with the API.
ATTACKED_ELSEWHERE = ("telegram", "slack")


def serves_webhooks(target: str) -> bool:
    """Whether the package behind a registry entry (`module:create`) has a channel class with
    routes of its own (`web_routes` overridden), in any of its modes."""
    module = importlib.import_module(target.partition(":")[0])
    return any(
        isinstance(value, type)
        and issubclass(value, Channel)
        and value.web_routes is not Channel.web_routes
        for value in vars(module).values()
    )


# Async only because this module's pytestmark makes every test an asyncio one.
async def test_every_channel_that_serves_webhooks_is_under_the_corpus() -> None:
    """A webhook channel added to the registry fails here until its route is attacked."""
    serving = {kind for kind, target in CHANNEL_TYPES.items() if serves_webhooks(target)}
    attacked = {REGISTERED_AS.get(name, name) for name in PLATFORMS} | set(ATTACKED_ELSEWHERE)
    assert serving == attacked


@dataclass
class Webhooks:
    daemon: DaemonProcess
    platforms: dict[str, Platform]
    #: The verification GETs, which publish nothing whatever they carry.
    handshakes: dict[str, Route]


async def ready(daemon: DaemonProcess, fakes: Fakes) -> None:
    """Every channel has checked its credentials and serves its route."""
    await fakes.twilio.wait_until(lambda: fakes.twilio.calls, WAIT_S)
    await fakes.feishu.wait_until(
        lambda: 200 in fakes.feishu.statuses("/open-apis/bot/v3/info"), WAIT_S
    )
    await fakes.wecom.wait_until(lambda: fakes.wecom.token_calls >= 1, WAIT_S)
    for event in ("whatsapp.receiving", "line.receiving", "qq.webhook_ready"):
        await daemon.wait_log(lambda e, name=event: e.get("event") == name)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def webhooks(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Webhooks]:
    async with (
        FakeTwilio() as twilio,
        FakeWhatsApp() as whatsapp,
        FakeLine() as line,
        FakeFeishu() as feishu,
        FakeWeCom(users=USERS["wecom"]) as wecom,
        FakeQQ() as qq,
    ):
        fakes = Fakes(twilio, whatsapp, line, feishu, wecom, qq)
        directory = tmp_path_factory.mktemp("webhook-attacks")
        async with running_daemon(directory, platforms.profiles(fakes)) as daemon:
            await ready(daemon, fakes)
            http = daemon.http_url
            yield Webhooks(
                daemon,
                {
                    "twilio": platforms.twilio(twilio, http),
                    "whatsapp": platforms.whatsapp(whatsapp, http),
                    "line": platforms.line(line, http),
                    "feishu": platforms.feishu(feishu, http),
                    "wecom": platforms.wecom(wecom, http),
                    "qq": platforms.qq(qq, http),
                },
                {
                    "whatsapp verification": platforms.whatsapp_verification(whatsapp, http),
                    "wecom verification": platforms.wecom_verification(wecom, http),
                },
            )


async def accepted(webhooks: Webhooks, platform: Platform) -> float:
    return await webhooks.daemon.metric(
        "octos_messages_in_total", profile=platform.profile, outcome="accepted"
    )


@pytest.mark.parametrize("name", PLATFORMS)
async def test_hostile_requests_to_a_webhook_never_get_a_5xx_or_a_hang(
    webhooks: Webhooks, name: str
) -> None:
    platform = webhooks.platforms[name]
    sender = USERS[name][0]
    outcomes = await run_fixed_corpus(platform.route, platform.message(sender, "corpus genuine"))
    assert outcomes["evil host"].status == 421
    for case in ("forged signature", "missing signature", "stale signature"):
        if case in outcomes:
            assert outcomes[case].status in REFUSED, outcomes[case]
    assert await run_random_corpus(platform.route, examples=RANDOM_EXAMPLES) == RANDOM_EXAMPLES
    # Whatever the corpus got through (the genuine body with odd headers) is dispatched.
    await platform.barrier(sender)


@pytest.mark.parametrize("name", ["whatsapp verification", "wecom verification"])
async def test_hostile_verification_requests_are_refused_and_a_genuine_one_answered(
    webhooks: Webhooks, name: str
) -> None:
    route = webhooks.handshakes[name]
    outcomes = await run_fixed_corpus(route)
    assert outcomes["evil host"].status == 421
    for case in ("forged signature", "missing signature", "non-ascii signature"):
        assert outcomes[case].status in REFUSED, outcomes[case]
    if route.timestamped:
        assert outcomes["stale signature"].status in REFUSED, outcomes["stale signature"]
    assert await run_random_corpus(route, examples=RANDOM_EXAMPLES) == RANDOM_EXAMPLES
    expected = (
        platforms.WHATSAPP_CHALLENGE
        if name.startswith("whatsapp")
        else platforms.WECOM_ECHO.decode()
    )
    genuine = await send(route, "genuine", None, platforms.signed(route, b""))
    assert (genuine.status, genuine.body.decode()) == (200, expected)


@pytest.mark.parametrize("name", PLATFORMS)
async def test_forged_and_stale_messages_publish_nothing_and_a_genuine_one_is_answered(
    webhooks: Webhooks, name: str
) -> None:
    platform, sender = webhooks.platforms[name], USERS[name][1]
    before = await accepted(webhooks, platform)
    forged_text = platform.marker("forged")
    body = platform.message(sender, forged_text)
    cases = [
        (case, case_body, headers, REFUSED)
        for case, case_body, headers in fixed_cases(platform.route, body)
        if case in FORGERIES and case not in platform.not_forgeries
    ]
    cases += platform.extras(sender, forged_text)
    assert {"forged signature", "missing signature"} <= {case for case, *_rest in cases}
    for case, case_body, headers, refused in cases:
        outcome = await send(platform.route, case, case_body, headers)
        assert outcome.status in refused, outcome
    # The same kind of message, genuinely signed: answered, and the only one published.
    genuine_text = platform.marker("genuine")
    assert await platform.genuine(sender, genuine_text) == 200
    await platform.wait_until(lambda: platform.replies(sender)[-1:] == [genuine_text])
    assert platform.replies(sender) == [genuine_text]
    assert await accepted(webhooks, platform) == before + 1
