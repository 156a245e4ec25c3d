"""The lifecycle contract every channel type keeps, checked the same way for each.

Each registered type (and a plugin channel) is built through `build_channel` from a config that
points at its fake platform or at local resources, then: it starts and receives; `stop()` may be
called twice; cancelling `start()` ends it within a second; a failed delivery raises a typed
`ChannelError`; the allow list lets the allowed sender in and keeps a stranger out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from structlog.typing import EventDict, WrappedLogger

from bus import AgentHandle, InboundMessage, OutboundMessage, create_bus
from channels.base import Channel
from channels.discord import DiscordChannel
from channels.errors import ChannelError
from channels.feishu import FeishuChannel
from channels.line import LineChannel
from channels.matrix import MatrixChannel
from channels.qq import QQBotChannel
from channels.registry import CHANNEL_TYPES, PLUGIN_TYPE, ChannelContext, build_channel
from channels.slack import SlackChannel
from channels.twilio import TwilioChannel
from channels.wecom import WeComChannel
from channels.wecom_bot import WecomBotChannel
from channels.whatsapp import WhatsAppChannel
from config import (
    ApiChannelConfig,
    ChannelConfig,
    CliChannelConfig,
    DiscordConfig,
    EmailConfig,
    FeishuConfig,
    LineConfig,
    MatrixConfig,
    PluginChannelConfig,
    QQBotConfig,
    SlackConfig,
    TelegramConfig,
    TwilioConfig,
    WecomBotConfig,
    WeComConfig,
    WhatsAppConfig,
)
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.imap_server import FakeImap
from tests.fakes.line_server import FakeLine
from tests.fakes.matrix_server import FakeMatrix
from tests.fakes.qq_server import FakeQQ
from tests.fakes.slack_server import FakeSlack
from tests.fakes.smtp_server import FakeSmtp
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.twilio_server import FakeTwilio
from tests.fakes.wecom_bot_server import FakeWecomBot
from tests.fakes.wecom_server import FakeWeCom
from tests.fakes.whatsapp_server import FakeWhatsApp
from tests.support.hub import ChannelHub

pytestmark = pytest.mark.slow

WAIT_S = 10.0
#: How soon a channel must be gone once its `start()` task is cancelled.
CANCEL_BOUND_S = 1.0


@dataclass
class Rig:
    """One channel type wired to its fake platform (or local resources)."""

    config: ChannelConfig
    #: Returns once the started channel receives from its platform.
    ready: Callable[[Channel, AgentHandle], Awaitable[None]]
    #: Arranges for the next delivery to fail and returns the message that will.
    failing_message: Callable[[Channel], Awaitable[OutboundMessage]]
    allowed: str
    stranger: str
    #: A channel with only the three required members has no `stop()` of its own: its
    #: `start()` ends when cancelled (which the channel manager does after its grace period).
    stop_ends_start: bool = True


RigFactory = Callable[[Path, pytest.MonkeyPatch], AbstractAsyncContextManager[Rig]]


def message(channel: str, chat_id: str) -> OutboundMessage:
    return OutboundMessage(channel=channel, chat_id=chat_id, content="does this arrive?")


@asynccontextmanager
async def telegram_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeTelegram() as fake:

        async def ready(_channel: Channel, _agent: AgentHandle) -> None:
            await fake.wait_until(lambda: fake.long_polls_waiting > 0, timeout_s=WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            return message("telegram", "@no_such_channel")  # a chat the fake does not know

        config = TelegramConfig(
            token=fake.token,
            base_url=fake.base_url,
            base_file_url=fake.base_file_url,
            poll_timeout_s=5,
            allow=[4201],
        )
        yield Rig(config, ready, failing, allowed="4201|alice", stranger="6666|mallory")


@asynccontextmanager
async def discord_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeDiscord() as fake:

        async def ready(channel: Channel, _agent: AgentHandle) -> None:
            await fake.wait_ready(WAIT_S)
            assert isinstance(channel, DiscordChannel)
            await asyncio.wait_for(channel.wait_receiving(), WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            return message("discord", str(fake.new_id()))  # a channel the fake does not know

        config = DiscordConfig(
            token=fake.token,
            api_base_url=fake.api_base_url,
            gateway_url=fake.gateway_url,
            allow=["@alice"],
        )
        yield Rig(config, ready, failing, allowed="111|alice", stranger="666|mallory")


@asynccontextmanager
async def slack_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeSlack() as fake:

        async def ready(channel: Channel, _agent: AgentHandle) -> None:
            assert isinstance(channel, SlackChannel)
            await asyncio.wait_for(channel.wait_receiving(), WAIT_S)
            await fake.wait_connected(timeout_s=WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            fake.fail_next("chat.postMessage", "channel_not_found")
            return message("slack", "CNOWHERE01")

        config = SlackConfig(
            bot_token=fake.bot_token,
            app_token=fake.app_token,
            base_url=fake.base_url,
            allow=["UALICE0001"],
        )
        yield Rig(config, ready, failing, allowed="UALICE0001", stranger="UMALLORY01")


@asynccontextmanager
async def twilio_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeTwilio() as fake:

        async def ready(channel: Channel, _agent: AgentHandle) -> None:
            assert isinstance(channel, TwilioChannel)
            await asyncio.wait_for(channel.wait_receiving(), WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            return message("twilio", "not-a-phone-number")  # Twilio error 21211

        config = TwilioConfig(
            account_sid=fake.account_sid,
            auth_token=fake.auth_token,
            from_number=fake.number,
            public_url="https://sms.example.com/twilio/sms",
            api_base_url=fake.base_url,
            allow=["+15550001111"],
        )
        yield Rig(config, ready, failing, allowed="+15550001111", stranger="+15550009999")


@asynccontextmanager
async def whatsapp_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeWhatsApp() as fake:

        async def ready(channel: Channel, _agent: AgentHandle) -> None:
            assert isinstance(channel, WhatsAppChannel)
            await asyncio.wait_for(channel.wait_receiving(), WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            fake.fail_next(131047)  # outside the 24-hour window: not retried
            return message("whatsapp", "15550001111")

        config = WhatsAppConfig(
            access_token=fake.access_token,
            phone_number_id=fake.phone_number_id,
            app_secret=fake.app_secret,
            verify_token=fake.verify_token,
            api_base_url=fake.base_url,
            allow=["15550001111"],
        )
        yield Rig(config, ready, failing, allowed="15550001111", stranger="15550009999")


@asynccontextmanager
async def line_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeLine() as fake:

        async def ready(channel: Channel, _agent: AgentHandle) -> None:
            assert isinstance(channel, LineChannel)
            await asyncio.wait_for(channel.wait_receiving(), WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            return message("line", "not-a-line-chat")  # LINE refuses to push there

        alice = "U1111111111111111111111111111a11"
        config = LineConfig(
            channel_secret=fake.channel_secret,
            channel_access_token=fake.access_token,
            api_base_url=fake.api_base_url,
            data_api_base_url=fake.data_api_base_url,
            allow=[alice],
        )
        yield Rig(
            config, ready, failing, allowed=alice, stranger="U6666666666666666666666666666m66"
        )


@asynccontextmanager
async def matrix_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeMatrix() as fake:

        async def ready(channel: Channel, _agent: AgentHandle) -> None:
            assert isinstance(channel, MatrixChannel)
            await asyncio.wait_for(channel.wait_receiving(), WAIT_S)
            await fake.wait_until(lambda: fake.long_polls_waiting > 0, timeout_s=WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            return message("matrix", "!not-joined:fake.local")  # M_FORBIDDEN

        config = MatrixConfig(
            homeserver=fake.homeserver,
            user_id=fake.bot_user_id,
            access_token=fake.access_token,
            allow=["@alice:fake.local"],
        )
        yield Rig(config, ready, failing, "@alice:fake.local", "@mallory:fake.local")


@asynccontextmanager
async def email_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeImap() as imap, FakeSmtp() as smtp:

        async def ready(_channel: Channel, _agent: AgentHandle) -> None:
            await imap.wait_until(lambda: imap.idling > 0, timeout_s=WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            return message("email", "nobody@invalid.example")  # the fake refuses this RCPT

        config = EmailConfig.model_validate(
            {
                "address": imap.username,
                "imap": {
                    "host": "127.0.0.1",
                    "port": imap.port,
                    "security": "none",
                    "password": imap.password,
                },
                "smtp": {
                    "host": "127.0.0.1",
                    "port": smtp.port,
                    "security": "none",
                    "password": smtp.password,
                },
                "allow": ["alice@example.org", "*@friends.example"],
            }
        )
        yield Rig(config, ready, failing, "bob@friends.example", "mallory@evil.example")


@asynccontextmanager
async def feishu_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeFeishu() as fake:

        async def ready(channel: Channel, _agent: AgentHandle) -> None:
            assert isinstance(channel, FeishuChannel)
            await asyncio.wait_for(channel.wait_receiving(), WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            return message("feishu", "chat-the-bot-is-not-in")

        config = FeishuConfig(
            app_id=fake.app_id,
            app_secret=fake.app_secret,
            base_url=fake.base_url,
            allow=["ou_alice"],
        )
        yield Rig(config, ready, failing, allowed="ou_alice", stranger="ou_mallory")


@asynccontextmanager
async def wecom_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeWeCom() as fake:

        async def ready(channel: Channel, _agent: AgentHandle) -> None:
            assert isinstance(channel, WeComChannel)
            await asyncio.wait_for(channel.wait_receiving(), WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            return message("wecom", "no-such-user")

        config = WeComConfig(
            corp_id=fake.corp_id,
            agent_id=fake.agent_id,
            secret=fake.secret,
            token=fake.token,
            encoding_aes_key=fake.encoding_aes_key,
            api_base_url=fake.base_url,
            allow=["alice"],
        )
        yield Rig(config, ready, failing, allowed="alice", stranger="mallory")


@asynccontextmanager
async def wecom_bot_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeWecomBot() as fake:

        async def ready(channel: Channel, _agent: AgentHandle) -> None:
            assert isinstance(channel, WecomBotChannel)
            await asyncio.wait_for(channel.wait_receiving(), WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            fake.rate_limit_next()  # the next frame is refused with errcode 45009
            return message("wecom-bot", "alice")

        config = WecomBotConfig(
            bot_id=fake.bot_id, secret=fake.secret, ws_url=fake.ws_url, allow=["alice"]
        )
        yield Rig(config, ready, failing, allowed="alice", stranger="mallory")


@asynccontextmanager
async def qq_bot_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with FakeQQ() as fake:

        async def ready(channel: Channel, _agent: AgentHandle) -> None:
            assert isinstance(channel, QQBotChannel)
            await fake.wait_until(lambda: fake.token_requests >= 1, WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            return message("qq-bot", "c2c:alice-openid")  # answers no message: QQ refuses

        config = QQBotConfig(
            app_id=fake.app_id,
            app_secret=fake.app_secret,
            api_base_url=fake.api_base_url,
            token_url=fake.token_url,
            allow=["alice-openid"],
        )
        yield Rig(config, ready, failing, allowed="alice-openid", stranger="mallory-openid")


class LogWatch:
    """A structlog processor that wakes a waiter when an event with a given name is logged."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._changed = asyncio.Event()

    def __call__(self, _logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
        self.seen.add(str(event_dict.get("event")))
        self._changed.set()
        return event_dict

    async def wait_for(self, event: str) -> None:
        async with asyncio.timeout(WAIT_S):
            while event not in self.seen:
                self._changed.clear()
                await self._changed.wait()


@asynccontextmanager
async def api_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    watch = LogWatch()

    async def ready(_channel: Channel, _agent: AgentHandle) -> None:
        await watch.wait_for("api.web_chat_ready")

    async def failing(channel: Channel) -> OutboundMessage:
        # Nothing can take a reply once the server is closed.
        await channel.stop()
        return message("api", "alice")

    with capture_logs(processors=[watch]):
        yield Rig(ApiChannelConfig(port=0, allow=["alice"]), ready, failing, "alice", "mallory")


@contextmanager
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    ends = [read_fd, write_fd]
    try:
        yield read_fd, write_fd
    finally:
        for fd in ends:
            with contextlib.suppress(OSError):  # the test may have closed it already
                os.close(fd)


@asynccontextmanager
async def cli_rig(_tmp: Path, patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    """The terminal channel on pipes standing in for the terminal's stdin and stdout."""
    with (
        pipe() as (stdin_fd, keyboard_fd),
        pipe() as (screen_fd, stdout_fd),
        open(stdin_fd, closefd=False) as stdin,  # noqa: ASYNC230 (no I/O: wraps a pipe)
        open(stdout_fd, "w", closefd=False) as stdout,  # noqa: ASYNC230
    ):
        patch.setattr(sys, "stdin", stdin)
        patch.setattr(sys, "stdout", stdout)
        user = "who-ran-the-daemon"
        patch.setenv("USER", user)
        patch.setenv("LOGNAME", user)

        async def ready(_channel: Channel, agent: AgentHandle) -> None:
            os.write(keyboard_fd, b"anyone there?\n")
            received = await asyncio.wait_for(agent.recv(), WAIT_S)
            assert isinstance(received, InboundMessage)
            assert received.content == "anyone there?"

        async def failing(_channel: Channel) -> OutboundMessage:
            os.close(screen_fd)  # the terminal went away
            return message("cli", "local")

        yield Rig(CliChannelConfig(allow=[user]), ready, failing, user, "mallory")


@asynccontextmanager
async def plugin_rig(_tmp: Path, _patch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    async with ChannelHub() as hub:

        async def ready(_channel: Channel, _agent: AgentHandle) -> None:
            await asyncio.wait_for(hub.connected("test").wait(), WAIT_S)

        async def failing(_channel: Channel) -> OutboundMessage:
            hub.fail_next_send("unavailable")
            return message("test", "chat-1")

        config = PluginChannelConfig(
            class_path="tests.support.socket_channel:SocketChannel",
            options={"port": hub.port, "name": "test"},
            allow=["alice"],
        )
        yield Rig(config, ready, failing, "alice", "mallory", stop_ends_start=False)


RIGS: dict[str, RigFactory] = {
    "telegram": telegram_rig,
    "discord": discord_rig,
    "slack": slack_rig,
    "line": line_rig,
    "matrix": matrix_rig,
    "api": api_rig,
    "cli": cli_rig,
    PLUGIN_TYPE: plugin_rig,
    "twilio": twilio_rig,
    "whatsapp": whatsapp_rig,
    "email": email_rig,
    "feishu": feishu_rig,
    "wecom": wecom_rig,
    "wecom-bot": wecom_bot_rig,
    "qq-bot": qq_bot_rig,
}


@pytest.fixture(params=list(RIGS))
async def rig(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    async with RIGS[request.param](tmp_path, monkeypatch) as prepared:
        yield prepared


@pytest.fixture
def channel(rig: Rig, tmp_path: Path) -> Channel:
    return build_channel(rig.config, ChannelContext(profile="contract", data_dir=tmp_path))


@asynccontextmanager
async def started(channel: Channel, rig: Rig) -> AsyncIterator[asyncio.Task[None]]:
    """`channel.start()` as a task, receiving; afterwards stopped (cancelled if it must be)."""
    agent, publisher = create_bus(64)
    sender = publisher.inbound_sender()
    task = asyncio.create_task(channel.start(sender), name=f"contract:{channel.name}")
    try:
        await rig.ready(channel, agent)
        assert not task.done(), "start() ended while the channel should be receiving"
        yield task
    finally:
        await channel.stop()
        if not task.done() and not rig.stop_ends_start:
            task.cancel()
        await asyncio.wait({task}, timeout=WAIT_S)
        sender.close()
        publisher.close()
        assert task.done(), "start() did not end after stop()"


def test_every_registered_channel_type_is_in_the_contract() -> None:
    assert set(RIGS) == {*CHANNEL_TYPES, PLUGIN_TYPE}


async def test_stop_ends_start_and_may_be_called_twice(rig: Rig, channel: Channel) -> None:
    async with started(channel, rig) as task:
        await asyncio.wait_for(channel.stop(), WAIT_S)
        await asyncio.wait_for(channel.stop(), WAIT_S)
        if rig.stop_ends_start:
            await asyncio.wait({task}, timeout=WAIT_S)
            assert task.done(), "start() still runs after stop()"
            assert not task.cancelled()
            assert task.exception() is None


async def test_cancelling_start_ends_the_channel_within_a_second(
    rig: Rig, channel: Channel
) -> None:
    async with started(channel, rig) as task:
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_BOUND_S)
        assert task.done(), f"start() still runs {CANCEL_BOUND_S} s after it was cancelled"
        await asyncio.wait_for(channel.stop(), CANCEL_BOUND_S)
        await asyncio.wait_for(channel.stop(), CANCEL_BOUND_S)


async def test_a_failed_delivery_raises_a_typed_error(rig: Rig, channel: Channel) -> None:
    async with started(channel, rig):
        outbound = await rig.failing_message(channel)
        with pytest.raises(ChannelError):
            await asyncio.wait_for(channel.send(outbound), WAIT_S)


def test_the_allow_list_lets_the_allowed_in_and_keeps_a_stranger_out(
    rig: Rig, channel: Channel
) -> None:
    assert channel.is_allowed(rig.allowed)
    assert not channel.is_allowed(rig.stranger)
