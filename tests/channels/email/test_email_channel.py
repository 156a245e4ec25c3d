"""The email channel end to end in one process: fake IMAP in, aiosmtplib to the fake SMTP out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from bus import ANSWERS, OutboundMessage
from channels.email import EmailChannel
from channels.email.smtp import DEFAULT_RATE_LIMIT_WAIT_S, MailRejected
from channels.errors import AuthError, MessageTooLong, RateLimited, TransientError
from channels.media_info import MEDIA_DETAILS
from channels.registry import ChannelContext, build_channel
from config import EmailConfig
from gateway.cli.probes import Outcome, probe_channel
from tests.channels.email.conftest import ALICE, BOT, email_config
from tests.channels.email.inbound import ScriptedInbound
from tests.fakes.imap_server import FakeImap
from tests.fakes.mail import make_mail
from tests.fakes.smtp_server import FakeSmtp
from tests.support.daemon import free_port

WAIT_S = 10.0


async def receive(channel: EmailChannel, imap: FakeImap, raws: list[bytes]) -> ScriptedInbound:
    """Run the channel until every message in `raws` was handed over and marked seen."""
    inbound = ScriptedInbound()
    task = asyncio.create_task(channel.start(inbound), name="test:email")
    try:
        uids = [await imap.deliver(raw) for raw in raws]
        await imap.wait_until(lambda: all(imap.is_seen(uid) for uid in uids) or task.done(), WAIT_S)
        assert not task.done()
    finally:
        await channel.stop()
        await asyncio.wait({task}, timeout=WAIT_S)
    return inbound


def built(config: EmailConfig, data_dir: Path) -> EmailChannel:
    """The channel as the daemon builds it: the registry gives it its allow list."""
    channel = build_channel(config, ChannelContext("work", data_dir))
    assert isinstance(channel, EmailChannel)
    return channel


def reply(
    text: str, *, reply_to: str | None, chat: str = ALICE, **fields: object
) -> OutboundMessage:
    return OutboundMessage(channel="email", chat_id=chat, content=text, reply_to=reply_to, **fields)


async def test_a_reply_is_threaded_under_the_received_message_even_after_a_restart(
    imap: FakeImap, smtp: FakeSmtp, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    config = make_config()
    raw = make_mail(ALICE, "hi", subject="Invoice 42", message_id="<q@client.example>")
    await receive(EmailChannel(config, data_dir=data_dir), imap, [raw])

    # A new channel (the daemon restarted) answers what the old one received.
    channel = EmailChannel(config, data_dir=data_dir)
    await channel.send(
        reply("**Paid** on Monday.", reply_to="q@client.example", delivery_id="t1.1")
    )
    [sent] = smtp.sent
    assert sent.mail_from == BOT
    assert sent.rcpt_tos == (ALICE,)
    assert sent.message["Subject"] == "Re: Invoice 42"
    assert sent.message["In-Reply-To"] == "<q@client.example>"
    assert sent.message["References"] == "<q@client.example>"
    assert sent.message["Message-ID"] == "<t1.1@example.org>"
    assert sent.text == "Paid on Monday.\n"
    assert "<strong>Paid</strong>" in sent.html


async def test_a_reply_in_a_long_thread_keeps_one_re_whatever_the_mail_programs_wrote(
    imap: FakeImap, smtp: FakeSmtp, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    channel = EmailChannel(make_config(), data_dir=data_dir)
    raws = [
        make_mail(ALICE, "hi", subject="RE: Aw: Thread", message_id="<t1@client.example>"),
        make_mail(ALICE, "hi", subject="Fwd: Report", message_id="<t2@client.example>"),
    ]
    await receive(channel, imap, raws)
    await channel.send(reply("one", reply_to="t1@client.example"))
    await channel.send(reply("two", reply_to="t2@client.example"))
    assert [m.message["Subject"] for m in smtp.sent] == ["Re: Thread", "Re: Fwd: Report"]


async def test_later_parts_and_notices_find_the_thread_by_answers_or_chat(
    imap: FakeImap, smtp: FakeSmtp, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    channel = EmailChannel(make_config(), data_dir=data_dir)
    raw = make_mail(ALICE, "hi", subject="Trip", message_id="<trip@client.example>")
    await receive(channel, imap, [raw])
    await channel.send(
        reply("part two", reply_to=None, metadata={ANSWERS: ["trip@client.example"]})
    )
    await channel.send(reply("a notice", reply_to=None))
    assert [m.message["In-Reply-To"] for m in smtp.sent] == ["<trip@client.example>"] * 2


async def test_smtp_replies_map_to_the_retry_layers_errors(
    smtp: FakeSmtp, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    channel = EmailChannel(make_config(), data_dir=data_dir)
    smtp.fail_next("DATA", "451 4.7.1 Rate limited, try again in 7 seconds")
    with pytest.raises(RateLimited) as limited:
        await channel.send(reply("one", reply_to=None))
    assert limited.value.retry_after_s == 7
    smtp.fail_next("RCPT", "450 4.7.1 Too many messages, slow down for 2 minutes")
    with pytest.raises(RateLimited) as limited:
        await channel.send(reply("one again", reply_to=None))
    assert limited.value.retry_after_s == 120
    smtp.fail_next("DATA", "421 4.7.0 Try again later")
    with pytest.raises(RateLimited) as limited:
        await channel.send(reply("one more", reply_to=None))
    assert limited.value.retry_after_s == DEFAULT_RATE_LIMIT_WAIT_S
    smtp.fail_next("DATA", "451 4.3.0 Temporary local problem")
    with pytest.raises(TransientError):
        await channel.send(reply("two", reply_to=None))
    smtp.fail_next("DATA", "552 5.3.4 Message too big")
    with pytest.raises(MessageTooLong):
        await channel.send(reply("three", reply_to=None))
    with pytest.raises(MailRejected, match="550"):
        await channel.send(reply("four", reply_to=None, chat="nobody@invalid.example"))
    assert smtp.sent == []
    await channel.send(reply("five", reply_to=None))
    assert [m.text for m in smtp.sent] == ["five\n"]


async def test_a_wrong_smtp_password_is_an_auth_error(
    smtp: FakeSmtp, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    channel = EmailChannel(make_config(smtp={"password": "wrong"}), data_dir=data_dir)
    with pytest.raises(AuthError, match=r"smtp\.password"):
        await channel.send(reply("hello", reply_to=None))


async def test_a_temporary_smtp_login_failure_or_a_refused_connection_is_retried(
    smtp: FakeSmtp, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    # "454 4.7.0 Temporary authentication failure": the server's auth backend is away, the
    # password is not wrong; SMTP's rule (4xx is temporary) holds for AUTH too.
    channel = EmailChannel(make_config(), data_dir=data_dir)
    for _mechanism in ("PLAIN", "LOGIN"):  # aiosmtplib tries each one the server offers
        smtp.fail_next("AUTH", "454 4.7.0 Temporary authentication failure")
    # 4.7.x reads as "slow down": waited out as a rate limit, retried either way.
    with pytest.raises((TransientError, RateLimited)):
        await channel.send(reply("hello", reply_to=None))
    closed = EmailChannel(make_config(smtp={"port": free_port()}), data_dir=data_dir)
    with pytest.raises(TransientError, match="Connect call failed"):
        await closed.send(reply("hello", reply_to=None))
    await channel.send(reply("hello", reply_to=None))
    assert [m.text for m in smtp.sent] == ["hello\n"]


async def test_a_chat_id_that_is_no_address_is_refused_before_smtp(
    smtp: FakeSmtp, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    channel = EmailChannel(make_config(), data_dir=data_dir)
    with pytest.raises(Exception, match="not an email address"):
        await channel.send(reply("hello", reply_to=None, chat="12345"))
    assert smtp.data_replies == []


async def test_attachments_are_saved_for_allowed_senders_only_and_files_sent_attached(
    imap: FakeImap, smtp: FakeSmtp, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    pdf = ("report.pdf", "application/pdf", b"%PDF-1.4 fake")
    channel = built(make_config(), data_dir)
    inbound = await receive(
        channel,
        imap,
        [
            make_mail(ALICE, "from a friend", attachments=(pdf,)),
            make_mail("mallory@evil.example", "from a stranger", attachments=(pdf,)),
        ],
    )
    friend, stranger = inbound.received
    [saved] = friend.media
    assert await asyncio.to_thread(Path(saved).read_bytes) == b"%PDF-1.4 fake"
    assert Path(saved).name.endswith("-report.pdf")
    assert stranger.media == []
    assert not (data_dir / "media" / "email" / "mallory@evil.example").exists()

    await channel.send(reply("here it is back", reply_to=None, media=[saved]))
    [sent] = smtp.sent
    [attachment] = list(sent.message.iter_attachments())
    assert attachment.get_filename() == Path(saved).name
    assert attachment.get_content() == b"%PDF-1.4 fake"


async def test_an_image_keeps_its_details_and_one_over_the_limit_is_named(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    photo = ("cat.jpg", "image/jpeg", b"\xff\xd8 fake jpeg")
    video = ("party.mp4", "video/mp4", b"x" * 4096)
    channel = build_channel(make_config(), ChannelContext("work", data_dir, max_media_bytes=1000))
    assert isinstance(channel, EmailChannel)

    inbound = await receive(
        channel, imap, [make_mail(ALICE, "two files", attachments=(photo, video))]
    )

    [message] = inbound.received
    [saved] = message.media
    assert message.metadata[MEDIA_DETAILS][saved] == {"name": "cat.jpg", "mime": "image/jpeg"}
    assert message.content.endswith(
        "\n[video: party.mp4, 4 KB, not downloaded: larger than the 1000 bytes limit]"
    )
    assert list((data_dir / "media").rglob("*.mp4")) == []


async def test_the_allow_list_takes_addresses_and_domains(
    make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    channel = built(make_config(), data_dir)
    assert channel.is_allowed(ALICE)
    assert channel.is_allowed("ALICE@Example.org")
    assert channel.is_allowed("bob@friends.example")
    assert not channel.is_allowed("bob@sub.friends.example")
    assert not channel.is_allowed("mallory@evil.example")
    assert not channel.is_allowed("friends.example")


async def test_probe_names_the_mailbox_and_a_wrong_password_is_an_auth_error(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    identity = await EmailChannel(make_config(), data_dir=data_dir).probe()
    assert identity is not None
    assert identity.startswith(f"{BOT} (IMAP 127.0.0.1 INBOX, UIDVALIDITY {imap.uidvalidity}")
    assert "fake-smtp.test" in identity
    broken = EmailChannel(make_config(imap={"password": "nope"}), data_dir=data_dir)
    with pytest.raises(AuthError, match=r"imap\.password"):
        await broken.probe()


async def test_doctor_s_fix_for_a_mailbox_that_does_not_answer_names_its_hosts(
    imap: FakeImap, smtp: FakeSmtp, data_dir: Path
) -> None:
    # Nothing listens on the IMAP port: the refusal carries no advice of its own.
    config = email_config(imap, smtp, imap={"port": free_port()})
    result = await probe_channel("work", config, data_dir, timeout_s=WAIT_S)
    assert result.outcome is Outcome.FAIL
    assert result.fix == "check the network and the channel's imap.host and smtp.host"
