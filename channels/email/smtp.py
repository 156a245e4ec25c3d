"""Sending replies with aiosmtplib, and what the SMTP server's answers mean for retrying.

One connection per reply (a bot's mail volume is low, and a fresh connection never trips
over a server that dropped an idle one). SMTP's own rule decides retries: a 4xx reply is
temporary and is retried (a 4.7.x "slow down" as a rate limit, waiting the seconds the server
names, if it names any), a 5xx reply is permanent and is not.

Which certificates a mail connection trusts (this one and IMAP's, `client_context`): by
default the system's CAs (`ssl.create_default_context()`, which honours `SSL_CERT_FILE`); with
`imap.ca_file` / `smtp.ca_file`, only the CAs in that PEM file, as curl's `--cacert`.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from email.message import EmailMessage
from typing import Literal

import aiosmtplib

from channels.errors import (
    AuthError,
    ChannelError,
    FatalChannelError,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from config.channels.email import ImapSettings, SmtpSettings

CHANNEL = "email"
Role = Literal["imap", "smtp"]


def client_context(settings: ImapSettings | SmtpSettings, role: Role) -> ssl.SSLContext:
    """The TLS context for `role`'s server. Reads the CA file: call it off the event loop."""
    if settings.ca_file is None:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=str(settings.ca_file))
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise FatalChannelError(
            f"{role}.ca_file {settings.ca_file} cannot be read as certificates ({reason})",
            channel=CHANNEL,
            suggestion=f"point {role}.ca_file at the PEM file of the CA that signed the "
            f"{role.upper()} server's certificate",
        ) from exc


def refused_certificate(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind `error`, if that is what it is."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def untrusted_certificate(
    error: BaseException, role: Role, what: str = ""
) -> TransientError | None:
    """The error to raise when `error` (while `role`'s client did `what`) is a certificate
    this side does not trust; None when it is something else. Worth retrying (a server may
    get a new certificate), but the fix is a setting, which the suggestion names."""
    refused = refused_certificate(error)
    if refused is None:
        return None
    doing = f"{role.upper()} {what}" if what else role.upper()
    return TransientError(
        f"{doing}: the server's certificate is not trusted ({refused})",
        channel=CHANNEL,
        suggestion=f"if the {role.upper()} server's certificate is signed by a private CA, set "
        f"{role}.ca_file to that CA's certificate (PEM); else check {role}.host against the "
        "name in the certificate",
    )


CHANNEL = "email"
SMTP_TIMEOUT_S = 30.0
#: How long a "slow down" (4.7.x) without a figure of its own is waited out.
DEFAULT_RATE_LIMIT_WAIT_S = 30.0
_ENHANCED_RATE = re.compile(r"\b4\.7\.\d{1,3}\b")
_RATE_WORDS = re.compile(r"rate|too many|slow down|throttl", re.IGNORECASE)
_WAIT = re.compile(r"(\d{1,5})\s*(s\b|sec|second|m\b|min)", re.IGNORECASE)


class MailRejected(ChannelError):
    """The SMTP server refused the message for good (a 5xx reply): not retried."""


def translate(error: aiosmtplib.SMTPException) -> ChannelError:
    """The channel error an aiosmtplib failure stands for."""
    # A 4xx to AUTH ("454 4.7.0 Temporary authentication failure") is the server's trouble, not
    # a wrong password: temporary like any other 4xx, below.
    if isinstance(error, aiosmtplib.SMTPAuthenticationError) and not 400 <= error.code < 500:
        return AuthError(
            f"the SMTP server refused the login ({error.code} {error.message})",
            channel=CHANNEL,
            suggestion="check smtp.username and smtp.password in this profile",
        )
    if isinstance(error, aiosmtplib.SMTPRecipientsRefused) and error.recipients:
        return translate(error.recipients[0])
    if isinstance(error, aiosmtplib.SMTPResponseException):
        return _from_reply(error.code, error.message)
    if (untrusted := untrusted_certificate(error, "smtp")) is not None:
        return untrusted
    if isinstance(error, aiosmtplib.SMTPNotSupported):
        return ChannelError(
            f"the SMTP server does not support what the config asks for ({error.message})",
            channel=CHANNEL,
            suggestion="check smtp.security (ssl, starttls or none) and smtp.port",
        )
    # Disconnected, connect errors and timeouts: the network, worth another try.
    return TransientError(f"SMTP: {type(error).__name__}: {error}", channel=CHANNEL)


def _connection_error(error: Exception) -> TransientError:
    """A connection that failed below SMTP: the network, or a certificate not trusted."""
    untrusted = untrusted_certificate(error, "smtp")
    if untrusted is not None:
        return untrusted
    return TransientError(f"SMTP: {error!r}", channel=CHANNEL)


def _from_reply(code: int, text: str) -> ChannelError:
    described = f"SMTP {code} {text}".strip()
    if 400 <= code < 500:
        if _ENHANCED_RATE.search(text) or _RATE_WORDS.search(text):
            wait_s = _named_wait_s(text)
            return RateLimited(wait_s, described, channel=CHANNEL)
        return TransientError(described, channel=CHANNEL)
    if code == 552 or "5.3.4" in text:
        return MessageTooLong(described, channel=CHANNEL)
    if code in (530, 534, 535):
        return AuthError(described, channel=CHANNEL, suggestion="check smtp.username/password")
    return MailRejected(described, channel=CHANNEL, suggestion="the server will not take it")


def _named_wait_s(text: str) -> float:
    """The pause a "try again in 30 seconds" / "in 2 minutes" reply names, else our default."""
    found = _WAIT.search(text)
    if found is None:
        return DEFAULT_RATE_LIMIT_WAIT_S
    unit_s = 60.0 if found.group(2).lower().startswith("m") else 1.0
    return float(found.group(1)) * unit_s


class SmtpSender:
    def __init__(self, settings: SmtpSettings, address: str) -> None:
        self._settings = settings
        self._address = address

    async def _client(self) -> aiosmtplib.SMTP:
        settings = self._settings
        tls_context: ssl.SSLContext | None = None
        if settings.security != "none":
            # Off the event loop: it reads the CA file, or the system's store.
            tls_context = await asyncio.to_thread(client_context, settings, "smtp")
        password = settings.password.get_secret_value() if settings.password else None
        username = (settings.username or self._address) if password is not None else None
        return aiosmtplib.SMTP(
            hostname=settings.host,
            port=settings.effective_port,
            username=username,
            password=password,
            use_tls=settings.security == "ssl",
            # False, not None: None would upgrade opportunistically where "none" was asked for.
            start_tls=settings.security == "starttls",
            tls_context=tls_context,
            timeout=SMTP_TIMEOUT_S,
        )

    async def send(self, message: EmailMessage, recipient: str) -> None:
        client = await self._client()
        try:
            async with client:
                await client.send_message(message, sender=self._address, recipients=[recipient])
        except aiosmtplib.SMTPException as exc:
            raise translate(exc) from exc
        except OSError as exc:
            raise _connection_error(exc) from exc

    async def probe(self) -> str:
        """Connect, greet and log in (when configured); what the server called itself."""
        client = await self._client()
        try:
            async with client:  # connects, greets, logs in; quits on the way out
                greeting = client.last_ehlo_response
        except aiosmtplib.SMTPException as exc:
            raise translate(exc) from exc
        except OSError as exc:
            raise _connection_error(exc) from exc
        first_line = (greeting.message.split("\n")[0] if greeting else "").strip()
        return first_line or self._settings.host
