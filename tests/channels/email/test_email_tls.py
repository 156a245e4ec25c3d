"""The security modes against fakes that speak TLS: implicit TLS and STARTTLS, both ways."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bus import OutboundMessage
from channels.email import EmailChannel
from channels.errors import ChannelError, FatalChannelError
from gateway.cli.probes import Outcome, probe_channel
from tests.channels.email.conftest import ALICE, email_config
from tests.channels.email.inbound import ScriptedInbound
from tests.fakes.imap_server import FakeImap
from tests.fakes.mail import make_mail
from tests.fakes.smtp_server import FakeSmtp
from tests.fakes.tls import Certificate, PrivateCa, make_certificate, make_private_ca

WAIT_S = 10.0


@pytest.fixture
def certificate(tmp_path: Path) -> Certificate:
    return make_certificate(tmp_path / "tls")


@pytest.fixture
def private_ca(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PrivateCa:
    # Whatever the machine running the tests trusts, only what the test says counts here.
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-system-cas.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    return make_private_ca(tmp_path / "private-ca")


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


@pytest.mark.parametrize("mode", ["ssl", "starttls"])
async def test_a_server_signed_by_a_private_ca_is_trusted_through_ca_file(
    mode: str, private_ca: PrivateCa, tmp_path: Path
) -> None:
    context = private_ca.server.server_context()
    trust = {"security": mode, "ca_file": str(private_ca.ca_path)}
    async with (
        FakeImap(tls=context, tls_mode=mode) as imap,
        FakeSmtp(tls=context, tls_mode=mode) as smtp,
    ):
        config = email_config(imap, smtp, imap=trust, smtp=trust)
        await round_trip(EmailChannel(config, data_dir=tmp_path / "data"), imap, smtp)


async def test_ca_file_replaces_the_system_s_cas_for_its_server(
    trusted: Certificate, tmp_path: Path
) -> None:
    # The server's certificate is trusted system-wide, but ca_file names another CA only.
    other_ca = make_private_ca(tmp_path / "other-ca", name="Another CA")
    context = trusted.server_context()
    async with FakeImap(tls=context) as imap, FakeSmtp(tls=context) as smtp:
        trust = {"security": "ssl", "ca_file": str(other_ca.ca_path)}
        config = email_config(imap, smtp, imap=trust, smtp=trust)
        channel = EmailChannel(config, data_dir=tmp_path / "data")
        with pytest.raises(ChannelError, match="certificate is not trusted"):
            await channel.probe()
        assert imap.logins_refused == 0


async def test_an_untrusted_certificate_s_fix_names_ca_file_in_doctor_and_on_send(
    private_ca: PrivateCa, tmp_path: Path
) -> None:
    context = private_ca.server.server_context()
    async with FakeImap(tls=context) as imap, FakeSmtp(tls=context) as smtp:
        config = email_config(imap, smtp, imap={"security": "ssl"}, smtp={"security": "ssl"})
        result = await probe_channel("work", config, tmp_path / "data", timeout_s=WAIT_S)
        assert result.outcome is Outcome.FAIL
        assert "certificate is not trusted" in result.detail
        assert "set imap.ca_file to that CA's certificate" in result.fix
        assert "base URL" not in result.fix
        channel = EmailChannel(config, data_dir=tmp_path / "data")
        with pytest.raises(ChannelError) as refused:
            await channel.send(OutboundMessage(channel="email", chat_id=ALICE, content="hi"))
        assert "set smtp.ca_file to that CA's certificate" in refused.value.suggestion
        assert smtp.sent == []


async def test_a_ca_file_that_cannot_be_read_is_one_line_naming_the_key(
    private_ca: PrivateCa, tmp_path: Path
) -> None:
    context = private_ca.server.server_context()
    missing = tmp_path / "nowhere" / "ca.pem"
    async with FakeImap(tls=context) as imap, FakeSmtp(tls=context) as smtp:
        trust = {"security": "ssl", "ca_file": str(missing)}
        config = email_config(imap, smtp, imap=trust, smtp=trust)
        channel = EmailChannel(config, data_dir=tmp_path / "data")
        with pytest.raises(FatalChannelError) as unreadable:
            await channel.probe()
        assert str(unreadable.value) == (
            f"email: imap.ca_file {missing} cannot be read as certificates "
            "(No such file or directory); point imap.ca_file at the PEM file of the CA that "
            "signed the IMAP server's certificate"
        )
        with pytest.raises(FatalChannelError, match=r"smtp\.ca_file"):
            await channel.send(OutboundMessage(channel="email", chat_id=ALICE, content="hi"))
