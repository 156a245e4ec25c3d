"""Build the raw bytes of an email as a user's mail program would send it, for the fakes."""

from __future__ import annotations

from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid


def make_mail(
    sender: str,
    body: str | None = "hello",
    *,
    to: str = "bot@example.org",
    subject: str = "A question",
    message_id: str | None = None,
    html: str | None = None,
    in_reply_to: str | None = None,
    headers: dict[str, str] | None = None,
    attachments: tuple[tuple[str, str, bytes], ...] = (),
) -> bytes:
    """`attachments` are (file name, content type, bytes)."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message["Date"] = format_datetime(datetime.now(UTC))
    message["Message-ID"] = message_id or make_msgid(domain="client.example")
    if in_reply_to:
        message["In-Reply-To"] = in_reply_to
        message["References"] = in_reply_to
    for name, value in (headers or {}).items():
        message[name] = value
    if body is not None:
        message.set_content(body)
        if html is not None:
            message.add_alternative(html, subtype="html")
    elif html is not None:
        message.set_content(html, subtype="html")
    for filename, content_type, data in attachments:
        maintype, _, subtype = content_type.partition("/")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    return message.as_bytes()
