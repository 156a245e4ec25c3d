"""A reply email: the agent's Markdown as a plain-text and an HTML part, threaded.

The HTML part is markdown-it-py's own renderer (`channels.markup.renderer`), the plain-text part
the email dialect of the one Markdown renderer (`channels.markup.plain`).
Threading follows RFC 5322: `In-Reply-To` names the message answered, `References` the thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, formataddr, make_msgid

from channels.email.state import ThreadInfo
from channels.markup.plain import render_email_text
from channels.markup.renderer import render_html as markdown_html

#: A subject for a message that answers nothing the channel remembers.
DEFAULT_SUBJECT = "Message from your assistant"
_HTML_PAGE = (
    '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
    '<body style="font-family: sans-serif; line-height: 1.4">{body}</body></html>'
)
#: References kept in a reply; long threads keep the first and the latest (RFC 5322 3.6.4).
MAX_REFERENCES = 20
#: The reply markers mail programs put before a subject, in any case: English "Re", German
#: "Aw", Scandinavian "Sv", Dutch "Antw", Chinese "回复"/"答复"/"回覆"; with a count as Outlook
#: and some lists write it ("Re[2]:", "Re(2):"), an ASCII or full-width colon, spaces anywhere.
_REPLY_MARKER = re.compile(
    r"\s*(?:re|aw|sv|antw|回复|答复|回覆)\s*(?:\[\d+\]|\(\d+\))?\s*[:：]\s*", re.IGNORECASE
)


def render_html(markdown: str) -> str:
    return _HTML_PAGE.format(body=markdown_html(markdown))


def render_text(markdown: str) -> str:
    return render_email_text(markdown)


@dataclass(frozen=True, slots=True)
class Envelope:
    sender: str
    recipient: str
    subject_prefix: str


def reply_subject(original: str, prefix: str) -> str:
    """`prefix` and the original subject without the reply markers it already starts with,
    so a thread stays "Re: Thread" however many mail programs answered it, in whatever
    language. A forward's "Fwd:" is not a reply marker: it stays, after the prefix."""
    if not original:
        return DEFAULT_SUBJECT
    own_marker = prefix.strip().casefold()
    subject = original
    while True:
        marker = _REPLY_MARKER.match(subject)
        if marker is not None:
            subject = subject[marker.end() :]
        elif own_marker and subject[: len(own_marker)].casefold() == own_marker:
            subject = subject[len(own_marker) :].lstrip()
        else:
            break
    if not subject:  # nothing but markers: one is enough
        return prefix.strip() or original
    return f"{prefix}{subject}"


def message_id_for(delivery_id: str, sender: str) -> str:
    """A Message-ID that is the same for every resend of one reply part (its delivery id),
    so a receiving system that sees it twice can tell it is one message."""
    domain = sender.rpartition("@")[2] or "localhost"
    safe = "".join(ch if ch.isalnum() or ch in ".-_" else "-" for ch in delivery_id)
    return f"<{safe}@{domain}>"


def compose_reply(
    envelope: Envelope,
    markdown: str,
    thread: ThreadInfo | None,
    *,
    delivery_id: str | None,
    now: datetime | None = None,
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = formataddr(("", envelope.sender))
    message["To"] = envelope.recipient
    subject = thread.subject if thread is not None else ""
    message["Subject"] = reply_subject(subject, envelope.subject_prefix)
    message["Date"] = format_datetime(now or datetime.now(UTC))
    domain = envelope.sender.rpartition("@")[2] or None
    message["Message-ID"] = (
        message_id_for(delivery_id, envelope.sender) if delivery_id else make_msgid(domain=domain)
    )
    if thread is not None:
        references = [*thread.references, thread.message_id]
        if len(references) > MAX_REFERENCES:
            references = [references[0], *references[-(MAX_REFERENCES - 1) :]]
        message["In-Reply-To"] = f"<{thread.message_id}>"
        message["References"] = " ".join(f"<{ref}>" for ref in references)
    message["Auto-Submitted"] = "auto-replied"
    message.set_content(render_text(markdown))
    message.add_alternative(render_html(markdown), subtype="html")
    return message
