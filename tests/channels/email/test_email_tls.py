"""The security modes against fakes that speak TLS: implicit TLS and STARTTLS, both ways."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bus import OutboundMessage
from channels.email import EmailChannel
from channels.errors import ChannelError
from tests.channels.email.conftest import ALICE, email_config
from tests.channels.email.inbound import ScriptedInbound
from tests.fakes.imap_server import FakeImap
from tests.fakes.mail import make_mail
from tests.fakes.smtp_server import FakeSmtp
from tests.fakes.tls import Certificate, make_certificate

WAIT_S = 10.0


@pytest.fixture
def certificate(tmp_path: Path) -> Certificate:
    return make_certificate(tmp_path / "tls")


@pytest.fixture
def trusted(certificate: Certificate, monkeypatch: pytest.MonkeyPatch) -> Certificate:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate.cert_path))
    return certificate


async def round_trip(channel: EmailChannel, imap: FakeImap, smtp: FakeSmtp) -> None:
    inbound = ScriptedInbound()
    task = asyncio.create_task(channel.start(inbound), name="test:email-tls")
    try:
        uid = await imap.deliver(make_mail(ALICE, "over TLS"))
        await imap.wait_until(lambda: imap.is_seen(uid) or task.done(), WAIT_S)
        assert not task.done()
    finally:
        await channel.stop()
        await asyncio.wait({task}, timeout=WAIT_S)
    [message] = inbound.received
    await channel.send(
        OutboundMessage(
            channel="email", chat_id=ALICE, content="back over TLS", reply_to=message.message_id
        )
    )
    [sent] = smtp.to(ALICE)
    assert sent.text.strip() == "back over TLS"


@pytest.mark.parametrize("mode", ["ssl", "starttls"])
async def test_both_security_modes_receive_and_send(
    mode: str, trusted: Certificate, tmp_path: Path
) -> None:
    context = trusted.server_context()
    async with (
        FakeImap(tls=context, tls_mode=mode) as imap,
        FakeSmtp(tls=context, tls_mode=mode) as smtp,
    ):
        config = email_config(imap, smtp, imap={"security": mode}, smtp={"security": mode})
        await round_trip(EmailChannel(config, data_dir=tmp_path / "data"), imap, smtp)
        commands = [command.split()[0] for command in imap.commands]
        if mode == "starttls":
            # The password goes only over the upgraded connection.
            assert commands.index("STARTTLS") < commands.index("LOGIN")
        else:
            assert "STARTTLS" not in commands


async def test_a_certificate_nobody_vouches_for_is_refused(
    certificate: Certificate, tmp_path: Path
) -> None:
    context = certificate.server_context()
    async with FakeImap(tls=context) as imap, FakeSmtp(tls=context) as smtp:
        config = email_config(imap, smtp, imap={"security": "ssl"}, smtp={"security": "ssl"})
        channel = EmailChannel(config, data_dir=tmp_path / "data")
        with pytest.raises(ChannelError, match="CERTIFICATE_VERIFY_FAILED"):
            await channel.probe()
        with pytest.raises(ChannelError, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
            await channel.send(OutboundMessage(channel="email", chat_id=ALICE, content="hi"))
        assert imap.logins_refused == 0
        assert smtp.sent == []
