"""A fake SMTP server: aiosmtpd on 127.0.0.1 in the test's own event loop, recording mail.

It accepts AUTH LOGIN/PLAIN with one username and password (without TLS, on loopback), keeps
every accepted message parsed, and answers scripted replies for a test's next DATA or RCPT
(`fail_next("DATA", "451 4.7.1 ...")`), so the channel's handling of 4xx and 5xx is exercised
against a real SMTP conversation. While `outage.down()`, every DATA is answered 451 (a relay
that cannot take mail for now) and recorded in `outage.failed`.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from functools import partial
from typing import Any, Self

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.fakes.changes import Changes
from tests.fakes.outage import Outage

HOSTNAME = "fake-smtp.test"


@dataclass(frozen=True)
class SentMail:
    mail_from: str
    rcpt_tos: tuple[str, ...]
    message: EmailMessage
    at: float

    @property
    def text(self) -> str:
        part = self.message.get_body(preferencelist=("plain",))
        return "" if part is None else str(part.get_content()).replace("\r\n", "\n")

    @property
    def html(self) -> str:
        part = self.message.get_body(preferencelist=("html",))
        return "" if part is None else str(part.get_content()).replace("\r\n", "\n")


class FakeSmtp:
    def __init__(
        self,
        *,
        username: str = "bot@example.org",
        password: str = "smtp-secret",
        tls: ssl.SSLContext | None = None,
        tls_mode: str = "ssl",
    ) -> None:
        """With `tls`, TLS from the start (`tls_mode="ssl"`, port 465's way) or STARTTLS
        required before anything else (`tls_mode="starttls"`)."""
        self.tls = tls
        self.tls_mode = tls_mode
        self.username = username
        self.password = password
        self.sent: list[SentMail] = []
        #: Every reply code the server gave to DATA, in order (250 for each accepted message).
        self.data_replies: list[int] = []
        self.refused_recipients = {"nobody@invalid.example"}
        self._failures: dict[str, list[str]] = {}
        self._server: asyncio.Server | None = None
        self._changes = Changes()
        self.outage = Outage()
        self.port = 0

    async def __aenter__(self) -> Self:
        loop = asyncio.get_running_loop()
        starttls = self.tls if self.tls_mode == "starttls" else None
        factory = partial(
            SMTP,
            self,
            hostname=HOSTNAME,
            tls_context=starttls,
            require_starttls=starttls is not None,
            auth_require_tls=starttls is not None,
            authenticator=self._authenticate,
            loop=loop,
        )
        implicit = self.tls if self.tls_mode == "ssl" else None
        self._server = await loop.create_server(factory, "127.0.0.1", 0, ssl=implicit)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def fail_next(self, stage: str, reply: str) -> None:
        """Answer the next `stage` ("AUTH", "RCPT" or "DATA") with `reply`, e.g. "451 4.7.1
        slow down"."""
        self._failures.setdefault(stage.upper(), []).append(reply)

    def to(self, address: str) -> list[SentMail]:
        return [mail for mail in self.sent if address in mail.rcpt_tos]

    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        await self._changes.wait_until(predicate, timeout_s)

    # aiosmtpd hooks

    def _authenticate(
        self, _server: SMTP, _session: Session, _envelope: Envelope, _mechanism: str, data: Any
    ) -> AuthResult:
        if self._failures.get("AUTH"):
            return AuthResult(success=False, handled=False, message=self._failures["AUTH"].pop(0))
        ok = (
            isinstance(data, LoginPassword)
            and data.login.decode() == self.username
            and data.password.decode() == self.password
        )
        # handled=False: aiosmtpd itself answers (235, or 535 on failure).
        return AuthResult(success=ok, handled=False)

    async def handle_RCPT(
        self,
        _server: SMTP,
        _session: Session,
        envelope: Envelope,
        address: str,
        _options: list[str],
    ) -> str:
        if self._failures.get("RCPT"):
            return self._failures["RCPT"].pop(0)
        if address in self.refused_recipients:
            return "550 5.1.1 no such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, _server: SMTP, _session: Session, envelope: Envelope) -> str:
        if self.outage.active:
            await self.outage.record_failed("DATA", "", envelope.original_content or b"")
            self.data_replies.append(451)
            return "451 4.3.0 Mail server temporarily unavailable"
        if self._failures.get("DATA"):
            reply = self._failures["DATA"].pop(0)
            self.data_replies.append(int(reply[:3]))
            await self._changes.notify()
            return reply
        content = envelope.original_content or b""
        message = BytesParser(policy=policy.default).parsebytes(content)
        assert isinstance(message, EmailMessage)
        self.sent.append(
            SentMail(
                str(envelope.mail_from),
                tuple(envelope.rcpt_tos),
                message,
                asyncio.get_running_loop().time(),
            )
        )
        self.data_replies.append(250)
        await self._changes.notify()
        return "250 2.0.0 OK queued"
