"""Email end to end: the daemon subprocess, imap-tools and aiosmtplib, the fake IMAP and SMTP."""

from __future__ import annotations

import itertools
import json
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e.conftest import WAIT_S, logged, running_daemon, session_keys
from tests.e2e.echo_bot import echo_profile
from tests.e2e.long_text import code_block, fences_balanced, mixed_text
from tests.fakes.imap_server import FakeImap
from tests.fakes.mail import make_mail
from tests.fakes.smtp_server import FakeSmtp, SentMail
from tests.support.daemon import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ALICE = "alice@example.org"
MALLORY = "mallory@evil.example"
EMAIL_LIMIT_CHARS = 100_000
#: How long a restarted daemon gets to answer what it received before a SIGKILL.
RECOVERY_WAIT_S = 15.0


def email_profile(
    imap: FakeImap,
    smtp: FakeSmtp,
    *,
    delay_s: float = 0.05,
    pieces: int = 2,
    imap_password: str | None = None,
) -> str:
    channel = f"""\
  - type: email
    address: {imap.username}
    imap: {{host: 127.0.0.1, port: {imap.port}, security: none,
            password: "{imap_password or imap.password}"}}
    smtp: {{host: 127.0.0.1, port: {smtp.port}, security: none, password: "{smtp.password}"}}
    allow: [{ALICE}, "*@friends.example"]
"""
    return echo_profile(channel, delay_s=delay_s, pieces=pieces)


async def connected(daemon: DaemonProcess, imap: FakeImap) -> None:
    await daemon.wait_log(logged("email.imap_connected"))
    await imap.wait_until(lambda: imap.idling > 0, WAIT_S)


@dataclass
class EmailBot:
    imap: FakeImap
    smtp: FakeSmtp
    daemon: DaemonProcess
    data_dir: Path
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_correspondent(self) -> str:
        return f"user{next(self.numbers)}@friends.example"

    async def say(self, sender: str, text: str) -> str:
        """Mail `text` from `sender`; returns its Message-ID (without brackets)."""
        message_id = f"m{next(self.numbers)}@client.example"
        await self.imap.deliver(make_mail(sender, text, message_id=f"<{message_id}>"))
        return message_id

    async def replies(self, to: str, count: int) -> list[SentMail]:
        await self.smtp.wait_until(lambda: len(self.smtp.to(to)) >= count, WAIT_S)
        return self.smtp.to(to)

    async def barrier(self, to: str) -> None:
        """Another mail, answered: everything before it in the chat has been delivered."""
        marker = f"barrier {next(self.numbers)}"
        before = len(self.smtp.to(to))
        await self.say(to, marker)
        await self.smtp.wait_until(
            lambda: any(m.text.strip() == marker for m in self.smtp.to(to)[before:]), WAIT_S
        )


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[EmailBot]:
    directory = tmp_path_factory.mktemp("email")
    async with (
        FakeImap() as imap,
        FakeSmtp() as smtp,
        running_daemon(directory, {"main": email_profile(imap, smtp)}) as daemon,
    ):
        await connected(daemon, imap)
        yield EmailBot(imap, smtp, daemon, directory / "data")


async def test_an_allowed_sender_gets_the_echo_a_stranger_one_notice_and_sigterm_exits_0(
    tmp_path: Path,
) -> None:
    async with (
        FakeImap() as imap,
        FakeSmtp() as smtp,
        running_daemon(tmp_path, {"main": email_profile(imap, smtp)}) as daemon,
    ):
        await connected(daemon, imap)
        # The stranger writes first: once Alice is answered, both were dispatched.
        for text in ("let me in", "please?"):
            await imap.deliver(make_mail(MALLORY, text))
        question = make_mail(
            f"Alice <{ALICE}>", "hello from alice", subject="Hi", message_id="<a1@client.example>"
        )
        uid = await imap.deliver(question)
        await smtp.wait_until(lambda: len(smtp.to(ALICE)) == 1, WAIT_S)
        assert imap.is_seen(uid)
        refused = await daemon.metric(
            "octos_messages_in_total", profile="main", channel="email", outcome="refused"
        )
        assert refused == 2
        assert await daemon.stop_cleanly() == 0

    # Shutdown delivers everything in hand, so what the fake holds now is complete.
    [reply] = smtp.to(ALICE)
    assert reply.text.strip() == "hello from alice"
    assert reply.message["Subject"] == "Re: Hi"
    assert reply.message["In-Reply-To"] == "<a1@client.example>"
    assert reply.message["References"] == "<a1@client.example>"
    assert reply.html  # the HTML alternative is there too
    [notice] = smtp.to(MALLORY)
    assert MALLORY in notice.text
    keys = session_keys(tmp_path / "data")
    assert f"main:email:{ALICE}" in keys
    assert not [key for key in keys if MALLORY in key], keys
    # Every message that reached the gateway is \Seen on the server now, the stranger's too.
    assert all(imap.is_seen(mail.uid) for mail in imap.mails)


async def test_a_long_mixed_reply_arrives_whole_in_one_email(bot: EmailBot) -> None:
    sender, text = bot.new_correspondent(), mixed_text()
    await bot.say(sender, text)
    [reply] = await bot.replies(sender, 1)

    assert len(reply.text) <= EMAIL_LIMIT_CHARS
    # The plain-text part is the agent's text itself: every paragraph, the code block
    # with its fences, every emoji sequence and CJK sentence, in order.
    assert reply.text.strip() == text.strip()
    assert code_block() in reply.text
    assert fences_balanced(reply.text)
    assert '<code class="language-python">' in reply.html


async def test_html_only_mail_is_read_as_text_and_its_attachment_saved(bot: EmailBot) -> None:
    sender = bot.new_correspondent()
    html = "<p>Please see the <b>attached</b> plan.</p><blockquote>old quoted</blockquote>"
    raw = make_mail(
        sender,
        None,
        html=html,
        attachments=(("plan.txt", "text/plain", b"step one\nstep two\n"),),
    )
    await bot.imap.deliver(raw)
    [reply] = await bot.replies(sender, 1)

    assert reply.text.strip() == "Please see the attached plan."  # the quote is left out
    saved = list((bot.data_dir / "main" / "media" / "email" / sender).glob("*-plan.txt"))
    assert [path.read_bytes() for path in saved] == [b"step one\nstep two\n"]


async def test_a_rate_limited_send_is_waited_out_and_the_reply_delivered_once(
    bot: EmailBot,
) -> None:
    sender = bot.new_correspondent()
    before = await bot.daemon.metric("octos_send_retries_total", channel="email")
    replies_before = len(bot.smtp.data_replies)
    bot.smtp.fail_next("DATA", "451 4.7.1 Rate limited, try again in 1 seconds")
    await bot.say(sender, "patience, please")
    await bot.barrier(sender)

    first, _barrier = bot.smtp.to(sender)
    assert first.text.strip() == "patience, please"
    assert bot.smtp.data_replies[replies_before:] == [451, 250, 250]
    retried = await bot.daemon.rate_limited_retries("email")
    assert retried > before


async def test_the_same_message_delivered_twice_is_answered_once(bot: EmailBot) -> None:
    sender = bot.new_correspondent()
    raw = make_mail(sender, "only once, please", message_id="<dup@client.example>")
    await bot.imap.deliver(raw)
    await bot.imap.deliver(raw)  # a copy filed again (same Message-ID, a new UID)
    await bot.barrier(sender)

    texts = [mail.text.strip() for mail in bot.smtp.to(sender)]
    assert texts[:-1] == ["only once, please"]


async def test_wrong_credentials_mark_the_channel_down_and_other_profiles_keep_working(
    tmp_path: Path,
) -> None:
    async with (
        FakeImap() as imap,
        FakeSmtp() as smtp,
        running_daemon(
            tmp_path,
            {
                "main": email_profile(imap, smtp),
                "broken": email_profile(imap, smtp, imap_password="not-the-password"),
            },
        ) as daemon,
    ):
        await connected(daemon, imap)
        await imap.wait_until(lambda: imap.logins_refused >= 1, WAIT_S)
        status, body = await daemon.get("/readyz")
        assert status == 503
        report = json.loads(body)
        broken = report["profiles"]["broken"]["email"]
        assert broken["status"] == "down"
        assert "imap.password" in broken["reason"]
        assert report["profiles"]["main"]["email"]["status"] == "healthy"
        # A fatal error is not retried: the server sees one refused login, not a stream.
        assert imap.logins_refused == 1

        await imap.deliver(make_mail(ALICE, "still there?"))
        await smtp.wait_until(lambda: len(smtp.to(ALICE)) == 1, WAIT_S)
        assert smtp.to(ALICE)[0].text.strip() == "still there?"
        assert await daemon.stop_cleanly() == 0


async def test_a_message_marked_seen_survives_a_sigkill_and_is_answered_once(
    tmp_path: Path,
) -> None:
    async with FakeImap() as imap, FakeSmtp() as smtp:
        # A slow agent: the message is durable (and \Seen) long before the reply is sent.
        profile = {"main": email_profile(imap, smtp, delay_s=2.0, pieces=3)}
        async with running_daemon(tmp_path, profile) as daemon:
            await connected(daemon, imap)
            uid = await imap.deliver(make_mail(ALICE, "remember me"))
            # \Seen is set and the UID mark moved past the message: the mailbox is done with it.
            await daemon.wait_log(
                lambda e: e.get("event") == "email.message_done" and e["uid"] == uid
            )
            assert imap.is_seen(uid)
            daemon.signal(signal.SIGKILL)
            await daemon.wait(WAIT_S)
        assert smtp.to(ALICE) == []

        async with running_daemon(tmp_path, profile) as daemon:
            await connected(daemon, imap)
            # Bounded below WAIT_S: while this is expected to fail, it should fail soon.
            await smtp.wait_until(lambda: len(smtp.to(ALICE)) >= 1, RECOVERY_WAIT_S)
            assert await daemon.stop_cleanly() == 0
        assert [mail.text.strip() for mail in smtp.to(ALICE)] == ["remember me"]
