"""QQ bot end to end: signed webhooks posted to the daemon's HTTP server, replies to the fake QQ.

The forged/stale/unsigned cases are built by `webhook_attacks` so a shared webhook attack
corpus can take them over.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.e2e.conftest import WAIT_S, running_daemon
from tests.e2e.long_text import assert_split_well, mixed_text, non_space, without_fences
from tests.fakes.qq_server import FakeQQ, qq_seed
from tests.support.daemon import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ALICE, MALLORY = "alice-openid", "mallory-openid"
PATH = "/qq/callback"
QQ_LIMIT_CHARS = 4000


def profile(fake: FakeQQ, *, delay_s: float = 0.05, mode: str = "webhook") -> str:
    return f"""\
queue_mode: followup
agent: {{type: echo, delay_s: {delay_s}, pieces: 2}}
channels:
  - type: qq-bot
    mode: {mode}
    app_id: "{fake.app_id}"
    app_secret: "{fake.app_secret}"
    api_base_url: {fake.api_base_url}
    token_url: {fake.token_url}
    webhook_path: {PATH}
    allow: [{ALICE}]
"""


def webhook_attacks(fake: FakeQQ, body: bytes) -> dict[str, dict[str, str]]:
    """Headers of requests QQ did not send: each must be refused (401) and change nothing."""
    now = str(int(time.time()))
    other = Ed25519PrivateKey.from_private_bytes(qq_seed("not-this-bot's-secret"))
    return {
        "forged": {**fake.sign(body), "X-Signature-Ed25519": other.sign(now.encode() + body).hex()}
        | {"X-Signature-Timestamp": now},
        "zeros": {**fake.sign(body), "X-Signature-Ed25519": "00" * 64},
        "stale": fake.sign(body, timestamp=int(time.time()) - 3600),
        "future": fake.sign(body, timestamp=int(time.time()) + 3600),
        "unsigned": {"Content-Type": "application/json"},
        "signature only": {"X-Signature-Ed25519": fake.sign(body)["X-Signature-Ed25519"]},
        "timestamp swapped": {**fake.sign(body), "X-Signature-Timestamp": str(int(now) - 1)},
    }


@dataclass
class QQBot:
    fake: FakeQQ
    daemon: DaemonProcess

    @property
    def url(self) -> str:
        return self.daemon.http_url + PATH

    async def say(self, text: str, *, user: str = ALICE) -> dict[str, Any]:
        event = self.fake.c2c_message(user, text)
        status, answer = await self.fake.deliver(self.url, event)
        assert (status, answer) == (200, {"op": 12, "d": 0})
        return event

    async def replies(self, chat: str, count: int) -> list[str]:
        await self.fake.wait_until(lambda: len(self.fake.replies_to(chat)) >= count, WAIT_S)
        return self.fake.replies_to(chat)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[QQBot]:
    async with (
        FakeQQ() as fake,
        running_daemon(tmp_path_factory.mktemp("qq"), {"main": profile(fake)}) as daemon,
    ):
        await daemon.wait_log(lambda e: e.get("event") == "qq.webhook_ready")
        yield QQBot(fake, daemon)


async def test_an_allowed_user_gets_the_echo_and_a_stranger_one_notice(bot: QQBot) -> None:
    fake = bot.fake
    await bot.say("let me in", user=MALLORY)
    await bot.say("please?", user=MALLORY)
    await bot.say("hello from alice")
    assert await bot.replies(f"c2c:{ALICE}", 1) == ["hello from alice"]
    [notice] = await bot.replies(f"c2c:{MALLORY}", 1)
    assert MALLORY in notice
    refused = await bot.daemon.metric(
        "octos_messages_in_total", channel="qq-bot", outcome="refused"
    )
    assert refused == 2
    assert fake.replies_to(f"c2c:{MALLORY}") == [notice]
    # A group @-mention from Alice is answered in the group.
    status, _ = await fake.deliver(bot.url, fake.group_message("GROUP1", ALICE, "hi group"))
    assert status == 200
    assert await bot.replies("group:GROUP1", 1) == ["hi group"]
    assert fake.violations == []


async def test_a_long_reply_arrives_complete_within_the_reply_allowance(bot: QQBot) -> None:
    fake, text = bot.fake, mixed_text()
    chat = f"c2c:{ALICE}"
    already = len(fake.replies_to(chat))
    await bot.say(text)
    # 10,000 characters in three replies of at most 4,000 characters: within QQ's five.
    # A barrier: replies in a chat are delivered in order, so once it is answered all is in.
    await bot.say("barrier")
    await fake.wait_until(lambda: fake.replies_to(chat)[-1:] == ["barrier"], WAIT_S)
    pieces = fake.replies_to(chat)[already:-1]
    assert all(len(piece) <= QQ_LIMIT_CHARS for piece in pieces)
    assert_split_well(text, pieces, fences_shown=True)


async def test_a_longer_reply_takes_five_replies_and_says_it_was_cut(bot: QQBot) -> None:
    fake, text = bot.fake, mixed_text(25_000)
    event = await bot.say(text)
    await fake.wait_until(
        lambda: len([r for r in fake.replies if r.msg_id == event["d"]["id"]]) >= 5, WAIT_S
    )
    ours = [r for r in fake.replies if r.msg_id == event["d"]["id"]]
    assert [(r.msg_seq, r.status) for r in ours] == [(n, 200) for n in range(1, 6)]
    pieces = [r.content for r in ours]
    assert all(len(piece) <= QQ_LIMIT_CHARS for piece in pieces)
    assert "truncated" in pieces[-1]
    # What is shown is the reply's beginning, in order.
    shown = non_space(without_fences("".join(pieces[:-1])))
    assert non_space(without_fences(text)).startswith(shown)
    assert fake.violations == []


async def test_a_rate_limit_is_waited_out_and_the_reply_delivered_once(bot: QQBot) -> None:
    fake = bot.fake
    before = await bot.daemon.rate_limited_retries("qq-bot")
    fake.rate_limit_next()
    event = await bot.say("patience, please")
    await fake.wait_until(lambda: "patience, please" in fake.replies_to(f"c2c:{ALICE}"), WAIT_S)
    ours = [r for r in fake.replies if r.msg_id == event["d"]["id"]]
    assert [(r.status, r.code) for r in ours] == [(429, 22009), (200, None)]
    after = await bot.daemon.rate_limited_retries("qq-bot")
    assert after > before


async def test_forged_stale_and_unsigned_webhooks_are_refused(bot: QQBot) -> None:
    fake = bot.fake
    before = await bot.daemon.metric("octos_messages_in_total", channel="qq-bot")
    body = json.dumps(fake.c2c_message(ALICE, "forged")).encode()
    for name, headers in webhook_attacks(fake, body).items():
        status, _ = await fake.post(bot.url, body, headers)
        assert status == 401, name
    assert await bot.daemon.metric("octos_messages_in_total", channel="qq-bot") == before
    # The callback URL check (unsigned, as QQ sends it) is answered with the signature QQ
    # expects; an unsigned event is not.
    status, _ = await fake.post(bot.url, body, {"Content-Type": "application/json"})
    assert status == 401
    status, answer = await fake.validate(bot.url, "Arq0D5A61EgUu4OxUvOp", "1725442341")
    assert status == 200
    fake.key.public_key().verify(
        bytes.fromhex(answer["signature"]), b"1725442341Arq0D5A61EgUu4OxUvOp"
    )


async def test_a_redelivered_event_is_answered_once(bot: QQBot) -> None:
    fake = bot.fake
    event = fake.c2c_message(ALICE, "just once")
    for _ in range(2):
        assert (await fake.deliver(bot.url, event))[0] == 200
    await bot.say("after the repeat")
    await fake.wait_until(lambda: "after the repeat" in fake.replies_to(f"c2c:{ALICE}"), WAIT_S)
    assert fake.replies_to(f"c2c:{ALICE}").count("just once") == 1


async def test_websocket_mode_answers_over_the_gateway(tmp_path: Path) -> None:
    async with FakeQQ() as fake:
        profiles = {"ws": profile(fake, mode="websocket")}
        async with running_daemon(tmp_path, profiles) as daemon:
            await fake.wait_until(lambda: fake.identifies, WAIT_S)
            await fake.push_gateway(fake.c2c_message(MALLORY, "me too"))
            await fake.push_gateway(fake.c2c_message(ALICE, "over the gateway"))
            await fake.wait_until(lambda: fake.replies_to(f"c2c:{ALICE}"), WAIT_S)
            await fake.wait_until(lambda: fake.replies_to(f"c2c:{MALLORY}"), WAIT_S)
            status, _ = await fake.post(daemon.http_url + PATH, b"{}", fake.sign(b"{}"))
            assert status == 404  # no webhook route in websocket mode
            assert await daemon.stop_cleanly() == 0
        assert fake.replies_to(f"c2c:{ALICE}") == ["over the gateway"]
        [notice] = fake.replies_to(f"c2c:{MALLORY}")
        assert MALLORY in notice


async def test_an_acknowledged_event_survives_a_sigkill_and_is_answered_once(
    tmp_path: Path,
) -> None:
    async with FakeQQ() as fake:
        async with running_daemon(tmp_path, {"main": profile(fake, delay_s=30)}) as daemon:
            await daemon.wait_log(lambda e: e.get("event") == "qq.webhook_ready")
            status, _ = await fake.deliver(
                daemon.http_url + PATH, fake.c2c_message(ALICE, "survive this")
            )
            assert status == 200  # acknowledged: QQ will not send it again
            daemon.signal(signal.SIGKILL)
            await daemon.wait(WAIT_S)
        async with running_daemon(tmp_path, {"main": profile(fake)}) as daemon:
            await fake.wait_until(lambda: fake.replies_to(f"c2c:{ALICE}"), WAIT_S)
            assert await daemon.stop_cleanly() == 0
        assert fake.replies_to(f"c2c:{ALICE}") == ["survive this"]
