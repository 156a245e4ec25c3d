"""Platform outages through the daemon: a reply due while the platform is down arrives once it
is back, on every channel, across a SIGKILL, and a stream cut by the outage ends complete.

Each platform's fake is taken down while a reply is due: it answers every call 500 (503 for
Discord, whose SDK retries 500 itself; 451 for SMTP), or it stops listening and drops its
connections, then listens again on the same port. The daemon's webhook agent is
`HeldEchoAgent`, which holds a turn until the platform is down, so the reply is due during the
outage and never before it. The outage lasts until more than `OLD_GIVE_UP_ATTEMPTS` attempts
carrying the reply failed (counted by the fake, or for a refused connection by the daemon's
`retry.retrying` lines), which is past where delivery used to give up for good; then the reply
must be shown, once. The platforms share one daemon and are down at the same time, so the
suite waits for the slowest backoff once, not once per platform.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import pytest

from tests.e2e import webhook_platforms as platforms
from tests.e2e.conftest import DAEMON_ENV, WAIT_S, running_daemon
from tests.fakes.discord_server import FakeDiscord, FakeUser
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.held_agent import HeldEchoAgent
from tests.fakes.imap_server import FakeImap
from tests.fakes.line_server import FakeLine
from tests.fakes.mail import make_mail
from tests.fakes.matrix_server import FakeMatrix
from tests.fakes.outage import Outage
from tests.fakes.qq_server import FakeQQ
from tests.fakes.slack_server import FakeSlack
from tests.fakes.smtp_server import FakeSmtp
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.twilio_server import FakeTwilio
from tests.fakes.wecom_bot_server import FakeWecomBot
from tests.fakes.wecom_server import FakeWeCom
from tests.fakes.whatsapp_server import FakeWhatsApp
from tests.support.attack_corpus import Route
from tests.support.daemon import DaemonProcess

#: Where a reply used to be given up for good: 5 tries within about 10 s.
OLD_GIVE_UP_ATTEMPTS = 5
#: Patience for the backoff (1 s doubling to 30 s, jittered) to get past those attempts (at most
#: 31 s), and for the next attempt after the platform returns (at most 30 s more).
OUTAGE_WAIT_S = 90.0
#: The Telegram outage a SIGKILL falls in: two minutes, far past the old give-up (~10 s).
TELEGRAM_OUTAGE_S = 120.0
pytestmark = [
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="function"),
    # Each test takes about a minute; a failing one should fail in its own waits, which say
    # what did not happen, rather than at the suite's timeout.
    pytest.mark.timeout(3 * OUTAGE_WAIT_S),
]

EDIT_INTERVAL_S = 1.0
#: The streams' edit interval: the rest of a stream comes well within it after its first
#: message, so its complete text is coalesced into the final, the only call that carries it.
STREAM_EDIT_INTERVAL_S = 5.0

TELEGRAM_ALICE = 4201
DISCORD_ALICE = FakeUser(id=111_111_111_111_111_111, username="alice")
SLACK_ALICE = "UALICE0001"
MATRIX_ALICE = "@alice:fake.local"
MAIL_ALICE = "alice@example.org"
WECOM_BOT_ALICE = "alice"


def profile(agent: HeldEchoAgent, channel: str) -> str:
    return f"agent: {{type: webhook, url: {agent.url}}}\nchannels:\n  - {channel}\n"


@dataclass
class Case:
    """One platform, with a chat of its own, and how its outage is made and measured."""

    profile: str
    channel: str
    #: (daemon, text): the allowed user writes `text` in the case's chat.
    say: Callable[[DaemonProcess, str], Awaitable[object]]
    #: The texts the bot's messages in the chat show now, oldest first.
    shown: Callable[[], list[str]]
    wait_until: Callable[[Callable[[], bool]], Awaitable[None]]
    #: The platform down for the block.
    down: Callable[[], AbstractAsyncContextManager[None]]
    #: Where the fake counts refused calls; None when the fake cannot see them (its server is
    #: stopped), and the daemon's retries are counted instead.
    outage: Outage | None
    #: Returns once the daemon's channel receives from the platform.
    ready: Callable[[DaemonProcess], Awaitable[None]]
    #: The channel and chat whose `retry.retrying` lines count the failed attempts when the
    #: fake cannot see them.
    retried_in: tuple[str, str] = ("", "")

    async def wait_failed(self, daemon: DaemonProcess, marker: str, *, more_than: int) -> None:
        """Until more than `more_than` attempts to deliver the reply carrying `marker` failed."""
        if self.outage is not None:
            await self.outage.wait_failed(
                carrying=marker, more_than=more_than, timeout_s=OUTAGE_WAIT_S
            )
            return

        channel, chat_id = self.retried_in

        def retried() -> int:
            return sum(
                1
                for event in daemon.logs
                if event.get("event") == "retry.retrying"
                and (event.get("channel"), event.get("chat_id")) == (channel, chat_id)
            )

        await daemon.wait_log(lambda _event: retried() > more_than, timeout_s=OUTAGE_WAIT_S)


def waiting(
    wait: Callable[[Callable[[], bool], float], Awaitable[None]],
) -> Callable[[Callable[[], bool]], Awaitable[None]]:
    return lambda condition: wait(condition, OUTAGE_WAIT_S)


def telegram(
    agent: HeldEchoAgent, fake: FakeTelegram, chat: int, edit_interval_s: float = EDIT_INTERVAL_S
) -> Case:
    channel = f"""type: telegram
    token: "{fake.token}"
    base_url: {fake.base_url}
    base_file_url: {fake.base_file_url}
    poll_timeout_s: 5
    edit_interval_s: {edit_interval_s}
    allow: [{TELEGRAM_ALICE}]"""

    async def say(_daemon: DaemonProcess, text: str) -> object:
        return fake.push_message(chat, text, user_id=TELEGRAM_ALICE, username="alice")

    async def wait_until(condition: Callable[[], bool]) -> None:
        await fake.wait_until(condition, timeout_s=OUTAGE_WAIT_S)

    return Case(
        "tg",
        profile(agent, channel),
        say,
        lambda: [str(message["text"]) for message in fake.bot_messages(chat)],
        wait_until,
        fake.outage.down,
        fake.outage,
        lambda _daemon: fake.wait_until(lambda: fake.long_polls_waiting > 0, timeout_s=WAIT_S),
    )


def discord(
    agent: HeldEchoAgent,
    fake: FakeDiscord,
    channel_id: int,
    edit_interval_s: float = EDIT_INTERVAL_S,
) -> Case:
    channel = f"""type: discord
    token: "{fake.token}"
    api_base_url: {fake.api_base_url}
    gateway_url: {fake.gateway_url}
    edit_interval_s: {edit_interval_s}
    allow: [{DISCORD_ALICE.id}]"""

    async def say(_daemon: DaemonProcess, text: str) -> object:
        return await fake.push_message(channel_id, DISCORD_ALICE, text)

    return Case(
        "dc",
        profile(agent, channel),
        say,
        lambda: [str(message["content"]) for message in fake.bot_messages(channel_id)],
        waiting(fake.wait_until),
        # discord.py tries a 500 five times itself, 25 s in all: a 503 reaches the channel.
        lambda: fake.outage.down(503),
        fake.outage,
        lambda _daemon: fake.wait_ready(WAIT_S),
    )


def slack(
    agent: HeldEchoAgent, fake: FakeSlack, dm: str, edit_interval_s: float = EDIT_INTERVAL_S
) -> Case:
    channel = f"""type: slack
    bot_token: "{fake.bot_token}"
    app_token: "{fake.app_token}"
    base_url: {fake.base_url}
    edit_interval_s: {edit_interval_s}
    allow: [{SLACK_ALICE}]"""

    async def say(_daemon: DaemonProcess, text: str) -> object:
        event = fake.user_message(dm, SLACK_ALICE, text, channel_type="im")
        await fake.push_event(event)
        return event

    return Case(
        "sl",
        profile(agent, channel),
        say,
        lambda: [str(message["text"]) for message in fake.bot_messages(dm)],
        waiting(fake.wait_until),
        fake.outage.down,
        fake.outage,
        lambda _daemon: fake.wait_connected(timeout_s=WAIT_S),
    )


def matrix(
    agent: HeldEchoAgent, fake: FakeMatrix, edit_interval_s: float = EDIT_INTERVAL_S
) -> Case:
    channel = f"""type: matrix
    homeserver: {fake.homeserver}
    user_id: "{fake.bot_user_id}"
    access_token: "{fake.access_token}"
    edit_interval_s: {edit_interval_s}
    allow: ["{MATRIX_ALICE}"]"""
    room = fake.create_room([MATRIX_ALICE])

    async def say(_daemon: DaemonProcess, text: str) -> object:
        return fake.say(room, MATRIX_ALICE, text)

    return Case(
        "mx",
        profile(agent, channel),
        say,
        lambda: fake.shown(room),
        waiting(fake.wait_until),
        fake.outage.down,
        fake.outage,
        lambda _daemon: fake.wait_until(lambda: fake.long_polls_waiting > 0, WAIT_S),
    )


def email(agent: HeldEchoAgent, imap: FakeImap, smtp: FakeSmtp) -> Case:
    channel = f"""type: email
    address: {imap.username}
    imap: {{host: 127.0.0.1, port: {imap.port}, security: none, password: "{imap.password}"}}
    smtp: {{host: 127.0.0.1, port: {smtp.port}, security: none, password: "{smtp.password}"}}
    allow: [{MAIL_ALICE}]"""

    async def say(_daemon: DaemonProcess, text: str) -> object:
        return await imap.deliver(make_mail(MAIL_ALICE, text, message_id=f"<{uuid.uuid4()}@x>"))

    return Case(
        "em",
        profile(agent, channel),
        say,
        lambda: [mail.text.strip() for mail in smtp.to(MAIL_ALICE)],
        waiting(smtp.wait_until),
        smtp.outage.down,
        smtp.outage,
        lambda _daemon: imap.wait_until(lambda: imap.idling > 0, WAIT_S),
    )


def wecom_bot(agent: HeldEchoAgent, fake: FakeWecomBot, chat: str) -> Case:
    """Refused connections: its replies travel on its websocket, which the outage cuts."""
    channel = f"""type: wecom-bot
    bot_id: "{fake.bot_id}"
    secret: "{fake.secret}"
    ws_url: {fake.ws_url}
    allow: [{WECOM_BOT_ALICE}]"""
    asked: list[str] = []

    async def say(_daemon: DaemonProcess, text: str) -> object:
        req_id, _msg_id = await fake.push_text(WECOM_BOT_ALICE, text, chat_id=chat)
        asked.append(req_id)
        return req_id

    def shown() -> list[str]:
        streamed = [fake.finished_text(req_id) for req_id in asked]
        return [text for text in streamed if text is not None] + fake.markdown_to(chat)

    return Case(
        "wb",
        profile(agent, channel),
        say,
        shown,
        waiting(fake.wait_until),
        fake.connections_refused,
        None,
        lambda _daemon: fake.wait_subscribed(timeout_s=WAIT_S),
        ("wecom-bot", chat),
    )


class WebhookFake(Protocol):
    """The fake of a platform that posts its messages to the daemon."""

    outage: Outage

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float, /) -> None: ...


def webhook_platform(
    name: str,
    profile_name: str,
    fake: WebhookFake,
    build: Callable[[str], platforms.Platform],
    ready: Callable[[DaemonProcess], Awaitable[None]],
    *,
    refused: Callable[[], AbstractAsyncContextManager[None]] | None = None,
) -> Case:
    """A platform of `webhook_platforms` (its profile is made there), talked to once the
    daemon's URL is known; its fake answers 500, or with `refused`, refuses connections."""
    sender = platforms.USERS[name][0 if refused is None else 1]
    built: list[platforms.Platform] = []

    def platform(daemon: DaemonProcess) -> platforms.Platform:
        if not built:
            built.append(build(daemon.http_url))
        return built[0]

    async def say(daemon: DaemonProcess, text: str) -> object:
        status = await platform(daemon).genuine(sender, text)
        assert status == 200, f"{name} webhook answered {status}"
        return status

    def shown() -> list[str]:
        return built[0].replies(sender) if built else []

    return Case(
        profile_name,
        "",
        say,
        shown,
        waiting(fake.wait_until),
        refused or fake.outage.down,
        None if refused is not None else fake.outage,
        ready,
        (name, sender),
    )


def logged_once_per_profile(
    event_name: str, profiles: int = 1
) -> Callable[[DaemonProcess], Awaitable[None]]:
    async def ready(daemon: DaemonProcess) -> None:
        await daemon.wait_log(lambda _event: daemon.count_logged(event_name) >= profiles)

    return ready


def on_path(platform: platforms.Platform, path: str) -> platforms.Platform:
    origin = platform.route.url.split("/", 3)
    return replace(
        platform, route=Route(**{**vars(platform.route), "url": "/".join(origin[:3]) + path})
    )


async def reply_survives(
    case: Case, daemon: DaemonProcess, agent: HeldEchoAgent, marker: str
) -> str:
    """The reply to a message is due while `case`'s platform is down; it arrives once the
    platform is back. Returns the reply's text."""
    text = f"a reply due during the outage {marker}"
    hold = agent.hold(marker)
    await case.ready(daemon)
    await case.say(daemon, text)
    await asyncio.wait_for(hold.reached.wait(), WAIT_S)
    async with case.down():
        hold.release.set()
        await case.wait_failed(daemon, marker, more_than=OLD_GIVE_UP_ATTEMPTS)
    await case.wait_until(lambda: text in case.shown())
    return text


@dataclass
class Platforms:
    agent: HeldEchoAgent
    cases: list[Case]
    profiles: dict[str, str]


async def all_platforms(stack: AsyncExitStack) -> Platforms:
    agent = await stack.enter_async_context(HeldEchoAgent())
    tg = await stack.enter_async_context(FakeTelegram())
    dc = await stack.enter_async_context(FakeDiscord())
    sl = await stack.enter_async_context(FakeSlack())
    mx = await stack.enter_async_context(FakeMatrix())
    imap = await stack.enter_async_context(FakeImap())
    smtp = await stack.enter_async_context(FakeSmtp())
    wb = await stack.enter_async_context(FakeWecomBot())
    fakes = platforms.Fakes(
        twilio=await stack.enter_async_context(FakeTwilio()),
        whatsapp=await stack.enter_async_context(FakeWhatsApp()),
        line=await stack.enter_async_context(FakeLine()),
        feishu=await stack.enter_async_context(FakeFeishu()),
        wecom=await stack.enter_async_context(FakeWeCom()),
        qq=await stack.enter_async_context(FakeQQ()),
    )
    wa_refused = await stack.enter_async_context(FakeWhatsApp())
    echo_agent = "agent: {type: echo}"
    webhook_agent = f"agent: {{type: webhook, url: {agent.url}}}"
    profiles = {
        name: text.replace(echo_agent, webhook_agent)
        for name, text in platforms.profiles(fakes).items()
    }
    refused_path = "/whatsapp/refused"
    profiles["wa-refused"] = (
        profiles["wa"]
        .replace(fakes.whatsapp.base_url, wa_refused.base_url)
        .replace("    allow:", f"    webhook_path: {refused_path}\n    allow:")
    )

    def checked_account(daemon: DaemonProcess) -> Awaitable[None]:
        # The channel takes webhooks once it checked the account with Twilio.
        return fakes.twilio.wait_until(lambda: len(fakes.twilio.calls) >= 1, WAIT_S)

    whatsapp_ready = logged_once_per_profile("whatsapp.receiving", profiles=2)
    cases = [
        telegram(agent, tg, 10_001),
        discord(agent, dc, 300_000_000_000_000_001),
        slack(agent, sl, "DTEST00001"),
        matrix(agent, mx),
        email(agent, imap, smtp),
        wecom_bot(agent, wb, "wrGROUP0001"),
        webhook_platform(
            "twilio",
            "sms",
            fakes.twilio,
            lambda http: platforms.twilio(fakes.twilio, http),
            checked_account,
        ),
        webhook_platform(
            "whatsapp",
            "wa",
            fakes.whatsapp,
            lambda http: platforms.whatsapp(fakes.whatsapp, http),
            whatsapp_ready,
        ),
        webhook_platform(
            "whatsapp",
            "wa-refused",
            wa_refused,
            lambda http: on_path(platforms.whatsapp(wa_refused, http), refused_path),
            whatsapp_ready,
            refused=wa_refused.connections_refused,
        ),
        webhook_platform(
            "line",
            "ln",
            fakes.line,
            lambda http: platforms.line(fakes.line, http),
            logged_once_per_profile("line.receiving"),
        ),
        webhook_platform(
            "feishu",
            "fs",
            fakes.feishu,
            lambda http: platforms.feishu(fakes.feishu, http),
            logged_once_per_profile("feishu.receiving"),
        ),
        webhook_platform(
            "wecom",
            "corp",
            fakes.wecom,
            lambda http: platforms.wecom(fakes.wecom, http),
            logged_once_per_profile("wecom.receiving"),
        ),
        webhook_platform(
            "qq",
            "qq",
            fakes.qq,
            lambda http: platforms.qq(fakes.qq, http),
            logged_once_per_profile("qq.webhook_ready"),
        ),
    ]
    for case in cases:
        if case.channel:
            profiles[case.profile] = case.channel
    assert set(profiles) == {case.profile for case in cases}
    return Platforms(agent, cases, profiles)


async def test_a_reply_due_during_an_outage_arrives_once_it_is_back_on_every_channel(
    tmp_path: Path,
) -> None:
    async with AsyncExitStack() as stack:
        rig = await all_platforms(stack)
        daemon = await stack.enter_async_context(running_daemon(tmp_path, rig.profiles))
        replies: dict[str, str] = {}

        async def one(case: Case) -> None:
            replies[case.profile] = await reply_survives(
                case, daemon, rig.agent, f"{case.profile.replace('-', '')}{uuid.uuid4().hex[:8]}"
            )

        async with asyncio.TaskGroup() as group:
            for case in rig.cases:
                group.create_task(one(case), name=f"outage:{case.profile}")
        # Shutdown delivers everything in hand: what the fakes show now is complete.
        assert await daemon.stop_cleanly() == 0

        shown = {case.profile: case.shown() for case in rig.cases}
        assert shown == {profile: [text] for profile, text in replies.items()}


@pytest.mark.timeout(TELEGRAM_OUTAGE_S + 2 * OUTAGE_WAIT_S)
async def test_a_telegram_reply_due_during_an_outage_survives_a_sigkill(tmp_path: Path) -> None:
    async with HeldEchoAgent() as agent, FakeTelegram() as fake, AsyncExitStack() as stack:
        case = telegram(agent, fake, 10_002)
        marker = f"killed{uuid.uuid4().hex[:8]}"
        text = f"a reply due during the outage {marker}"
        hold = agent.hold(marker)
        daemon = await stack.enter_async_context(
            running_daemon(tmp_path, {case.profile: case.channel})
        )
        restarted = DaemonProcess(daemon.config, env=DAEMON_ENV)
        stack.push_async_callback(restarted.stop)
        await case.ready(daemon)
        await case.say(daemon, text)
        await asyncio.wait_for(hold.reached.wait(), WAIT_S)
        async with case.down():
            outage_ends = asyncio.get_running_loop().time() + TELEGRAM_OUTAGE_S
            hold.release.set()
            await case.wait_failed(daemon, marker, more_than=1)
            daemon.signal(signal.SIGKILL)
            await daemon.wait()
            # The restarted daemon sends the reply its journal still holds undelivered.
            failed_before_restart = fake.outage.failed_carrying(marker)
            await restarted.start()
            # The restarted daemon alone tries past the old limit.
            await case.wait_failed(
                restarted, marker, more_than=failed_before_restart + OLD_GIVE_UP_ATTEMPTS
            )
            # The outage lasts its two minutes: nothing to wait on but the clock.
            await asyncio.sleep(max(0.0, outage_ends - asyncio.get_running_loop().time()))
        await case.wait_until(lambda: text in case.shown())
        assert await restarted.stop_cleanly() == 0

        assert case.shown() == [text]


def shows_a_start_of(shown: list[str], text: str) -> bool:
    """One message, showing the start of `text`: a stream under way."""
    return len(shown) == 1 and text.startswith(shown[0]) and shown[0] != text


def streamed_text(marker: str) -> str:
    """A reply streamed in many words; only its complete text carries `marker`, at the end."""
    words = " ".join(f"word{n}" for n in range(1, 31))
    return f"A streamed reply, cut by the outage: {words} end{marker}"


async def stream_survives(
    case: Case, daemon: DaemonProcess, agent: HeldEchoAgent, marker: str
) -> str:
    """A streamed reply is shown growing, the platform goes down mid-stream, and once it is back
    the message shows the complete text."""
    text = streamed_text(marker)
    hold = agent.hold(marker, after=1)
    await case.ready(daemon)
    await case.say(daemon, text)
    await asyncio.wait_for(hold.reached.wait(), WAIT_S)
    await case.wait_until(lambda: shows_a_start_of(case.shown(), text))
    async with case.down():
        hold.release.set()
        await case.wait_failed(daemon, marker, more_than=OLD_GIVE_UP_ATTEMPTS)
    await case.wait_until(lambda: case.shown() == [text])
    return text


async def test_a_stream_cut_by_an_outage_ends_complete_on_every_editing_channel(
    tmp_path: Path,
) -> None:
    async with AsyncExitStack() as stack:
        agent = await stack.enter_async_context(HeldEchoAgent())
        tg = await stack.enter_async_context(FakeTelegram())
        dc = await stack.enter_async_context(FakeDiscord())
        sl = await stack.enter_async_context(FakeSlack())
        mx = await stack.enter_async_context(FakeMatrix())
        interval_s = STREAM_EDIT_INTERVAL_S
        cases = [
            telegram(agent, tg, 10_003, edit_interval_s=interval_s),
            discord(agent, dc, 300_000_000_000_000_002, edit_interval_s=interval_s),
            slack(agent, sl, "DTEST00002", edit_interval_s=interval_s),
            matrix(agent, mx, edit_interval_s=interval_s),
        ]
        daemon = await stack.enter_async_context(
            running_daemon(tmp_path, {case.profile: case.channel for case in cases})
        )
        replies: dict[str, str] = {}

        async def one(case: Case) -> None:
            replies[case.profile] = await stream_survives(
                case, daemon, agent, f"{case.profile}{uuid.uuid4().hex[:8]}"
            )

        async with asyncio.TaskGroup() as group:
            for case in cases:
                group.create_task(one(case), name=f"stream-outage:{case.profile}")
        assert await daemon.stop_cleanly() == 0

        assert {case.profile: case.shown() for case in cases} == {
            profile: [text] for profile, text in replies.items()
        }
