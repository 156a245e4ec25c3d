"""Email against a real mail server: the daemon subprocess, Postfix, Dovecot and postgrey.

The fakes (`test_email_daemon.py`) script the channel's wire behaviour; these tests show what
only real servers settle: a reply threaded as a mail program threads it, the SMTP server gone
while a reply is due (also across a SIGKILL of the daemon), the IMAP server gone while mail
arrives, and a greylisting server turning the first delivery attempt away. Both connections use
STARTTLS with the server's test certificate, as a deployment would.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged
from tests.e2e.echo_bot import echo_profile
from tests.fakes.mail import make_mail
from tests.support.daemon import DaemonProcess, write_config
from tests.support.mailserver import MailAccount, MailServer, require_mailserver

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

#: How long Dovecot is away in its outage test.
OUTAGE_S = 30.0
#: How long Postfix is away while a reply is due: two minutes, as a relay restart or a deploy
#: may take, far past the old give-up (5 tries in ~10 s).
POSTFIX_OUTAGE_S = 120.0
#: A reply's retries back off up to 30 s (with jitter), so one may come that long after the
#: server returned; plus the daemon's own margin.
AFTER_OUTAGE_WAIT_S = 45.0


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def server() -> AsyncIterator[MailServer]:
    require_mailserver()
    async with MailServer() as mail_server:
        yield mail_server


@dataclass
class Correspondence:
    """The bot's mailbox and an allowed person's, at the same server."""

    server: MailServer
    bot: MailAccount
    person: MailAccount

    def profile(self, *, delay_s: float = 0.05) -> str:
        server = self.server
        channel = f"""\
  - type: email
    address: {self.bot.address}
    imap: {{host: 127.0.0.1, port: {server.imap_port}, security: starttls,
            password: "{self.bot.password}"}}
    smtp: {{host: 127.0.0.1, port: {server.smtp_port}, security: starttls}}
    allow: [{self.person.address}]
"""
        return echo_profile(channel, delay_s=delay_s, pieces=1)

    async def write(self, text: str, *, message_id: str, subject: str = "A question") -> None:
        raw = make_mail(
            self.person.address,
            text,
            to=self.bot.address,
            subject=subject,
            message_id=f"<{message_id}>",
        )
        await self.server.send(raw, sender=self.person.address, recipient=self.bot.address)

    async def replies(self) -> list[EmailMessage]:
        return [
            message
            for message in await self.server.mailbox(self.person)
            if self.bot.address in str(message["From"])
        ]

    async def replies_received(self, count: int, timeout_s: float = WAIT_S) -> list[str]:
        """The texts of the bot's replies once there are `count` of them."""
        await eventually(lambda: _at_least(self.replies(), count), timeout_s, self.server)
        return [text_of(message) for message in await self.replies()]


_numbers = iter(range(1, 1_000_000))


def correspondence(server: MailServer, *, greylisted: bool = False) -> Correspondence:
    number = next(_numbers)
    return Correspondence(
        server,
        server.account(f"bot{number}"),
        server.account(f"alice{number}", greylisted=greylisted),
    )


def text_of(message: EmailMessage) -> str:
    body = message.get_body(preferencelist=("plain",))
    return "" if body is None else str(body.get_content()).strip()


async def _at_least(replies: Awaitable[list[EmailMessage]], count: int) -> bool:
    return len(await replies) >= count


async def eventually(
    condition: Callable[[], Awaitable[bool]], timeout_s: float, server: MailServer
) -> None:
    """Reads the mailbox until `condition` holds: a Maildir gives no other sign of new mail."""
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the mailbox never showed it; the server said:\n{server.last_output()}"
            )
        await asyncio.sleep(0.25)


@asynccontextmanager
async def running_daemon(
    directory: Path, chat: Correspondence, **profile: Any
) -> AsyncIterator[DaemonProcess]:
    """The daemon, trusting the mail server's test certificate (OpenSSL's `SSL_CERT_FILE`)."""
    env = {**DAEMON_ENV, "SSL_CERT_FILE": str(chat.server.certificate.cert_path)}
    config = write_config(directory, {"main": chat.profile(**profile)})
    daemon = DaemonProcess(config, env=env)
    try:
        await daemon.start()
        yield daemon
    finally:
        await daemon.stop()


def smtp_refused(event: dict[str, Any]) -> bool:
    """A reply's send retried because the SMTP server refused the connection."""
    return (
        event.get("event") == "retry.retrying"
        and event.get("channel") == "email"
        and "[Errno 111]" in str(event.get("error", ""))  # ECONNREFUSED
    )


async def test_a_mail_is_answered_in_its_thread(server: MailServer, tmp_path: Path) -> None:
    chat = correspondence(server)
    async with running_daemon(tmp_path, chat) as daemon:
        await daemon.wait_log(logged("email.imap_connected"))
        await chat.write("hello from alice", message_id="q1@client.example", subject="Plans")
        assert await chat.replies_received(1) == ["hello from alice"]
        assert await daemon.stop_cleanly() == 0

    [reply] = await chat.replies()
    assert reply["Subject"] == "Re: Plans"
    assert reply["In-Reply-To"] == "<q1@client.example>"
    assert reply["References"] == "<q1@client.example>"
    assert str(reply["To"]) == chat.person.address
    # Sent to Postfix over STARTTLS ("ESMTPS"), then by LMTP into the person's mailbox.
    received = [" ".join(str(line).split()) for line in reply.get_all("Received", [])]
    assert any("by mail.octos.test (Postfix) with ESMTPS" in line for line in received), received


@pytest.mark.timeout(360)
async def test_a_reply_due_while_postfix_is_down_arrives_once_when_it_returns(
    server: MailServer, tmp_path: Path
) -> None:
    chat = correspondence(server)
    await chat.write("are you there?", message_id="q2@client.example")
    await eventually(lambda: _at_least(server.mailbox(chat.bot), 1), WAIT_S, server)
    await server.stop_postfix()
    try:
        # A first start reads the unseen mail: its reply is due with SMTP refusing connections.
        async with running_daemon(tmp_path, chat) as daemon:
            await daemon.wait_log(smtp_refused)
            # The outage itself: the reply keeps being retried meanwhile.
            await asyncio.sleep(POSTFIX_OUTAGE_S)
            assert await chat.replies() == []
            await server.start_postfix()
            assert await chat.replies_received(1, AFTER_OUTAGE_WAIT_S) == ["are you there?"]
            assert await daemon.stop_cleanly() == 0
    finally:
        if not server.postfix_running:
            await server.start_postfix()
    assert [text_of(reply) for reply in await chat.replies()] == ["are you there?"]


@pytest.mark.timeout(360)
async def test_a_reply_due_in_an_outage_survives_a_sigkill_and_arrives_once(
    server: MailServer, tmp_path: Path
) -> None:
    chat = correspondence(server)
    await chat.write("do not forget me", message_id="q3@client.example")
    await eventually(lambda: _at_least(server.mailbox(chat.bot), 1), WAIT_S, server)
    await server.stop_postfix()
    outage_ends = time.monotonic() + POSTFIX_OUTAGE_S
    try:
        async with running_daemon(tmp_path, chat) as daemon:
            await daemon.wait_log(logged("email.message_done"))
            await daemon.wait_log(smtp_refused)
            daemon.signal(signal.SIGKILL)
            await daemon.wait(WAIT_S)
        # Restarted while Postfix is still away: the journal has the reply as undelivered.
        async with running_daemon(tmp_path, chat) as daemon:
            await daemon.wait_log(smtp_refused)
            # The rest of the outage.
            await asyncio.sleep(max(0.0, outage_ends - time.monotonic()))
            assert await chat.replies() == []
            await server.start_postfix()
            assert await chat.replies_received(1, AFTER_OUTAGE_WAIT_S) == ["do not forget me"]
            assert await daemon.stop_cleanly() == 0
    finally:
        if not server.postfix_running:
            await server.start_postfix()
    assert [text_of(reply) for reply in await chat.replies()] == ["do not forget me"]


async def test_mail_that_arrived_while_dovecot_was_down_is_read_and_answered_once(
    server: MailServer, tmp_path: Path
) -> None:
    chat = correspondence(server)
    async with running_daemon(tmp_path, chat) as daemon:
        await daemon.wait_log(logged("email.imap_connected"))
        await chat.write("before", message_id="q4-0@client.example")
        assert await chat.replies_received(1) == ["before"]

        await server.stop_dovecot()
        try:
            await daemon.wait_log(logged("email.imap_failed"))
            # Postfix takes them and keeps them in its queue until Dovecot is back.
            missed = [f"while IMAP was away {n}" for n in range(1, 4)]
            for n, text in enumerate(missed, start=1):
                await chat.write(text, message_id=f"q4-{n}@client.example")
            # The outage itself: the channel keeps reconnecting meanwhile.
            await asyncio.sleep(OUTAGE_S)
        finally:
            await server.start_dovecot()
        answered = await chat.replies_received(1 + len(missed), AFTER_OUTAGE_WAIT_S)
        assert sorted(answered) == sorted(["before", *missed])
        assert await daemon.stop_cleanly() == 0
    # Nothing more came after the shutdown delivered everything in hand: each answered once.
    assert sorted(text_of(reply) for reply in await chat.replies()) == sorted(["before", *missed])


async def test_a_greylisted_reply_is_delivered_later_once(
    server: MailServer, tmp_path: Path
) -> None:
    chat = correspondence(server, greylisted=True)
    async with running_daemon(tmp_path, chat) as daemon:
        await daemon.wait_log(logged("email.imap_connected"))
        await chat.write("greylist me", message_id="q5@client.example")
        greylisted = await daemon.wait_log(
            lambda event: (
                event.get("event") == "retry.retrying"
                and event.get("channel") == "email"
                and "Greylisted" in str(event.get("error", ""))
            )
        )
        assert greylisted["reason"] == "transient"
        assert await chat.replies_received(1) == ["greylist me"]
        assert await daemon.stop_cleanly() == 0
    assert [text_of(reply) for reply in await chat.replies()] == ["greylist me"]
    turned_away = [
        line
        for line in server.maillog().splitlines()
        if f"450 4.2.0 <{chat.person.address}>" in line and "Greylisted" in line
    ]
    assert turned_away, server.last_output()
