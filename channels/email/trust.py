"""Which certificates a connection to the mail servers trusts, and what a refusal means.

By default the system's CAs (`ssl.create_default_context()`, which honours `SSL_CERT_FILE`).
With `imap.ca_file` / `smtp.ca_file`, only the CAs in that PEM file, as curl's `--cacert`: a
server signed by a private CA is trusted for that connection, and nothing else is.
"""

from __future__ import annotations

import ssl
from typing import Literal

from channels.errors import FatalChannelError, TransientError
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
