"""A received email, read into what the gateway needs: who, which thread, the new text.

The body is the `text/plain` part when there is one, else the HTML part turned into text
(html-text, on lxml). Quoted history ("On ... wrote:" and `>` lines) and the signature are cut
off (email-reply-parser, a port of GitHub's), so the agent sees what the sender wrote now. The
parser misses a signature under RFC 3676's delimiter, a line of exactly "-- ", in some layouts
(a one-line reply right above it), so everything from that line on is cut here first.
An empty body falls back to the subject. Attachments are kept as raw parts for the channel to
save, for allowed senders only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser

import html_text
from email_reply_parser import EmailReplyParser

from channels.email.addresses import bare_address, display_name

#: Longest text handed to the agent from one email (octos: 10,000 characters).
MAX_TEXT_CHARS = 20_000
_TRUNCATED = "\n[... the rest of the email was cut off]"
#: RFC 3676 4.3: the signature starts at a line of dash, dash, space. Only that exact line
#: does: a "--" within a line, or two dashes without the space, are the sender's text.
_SIGNATURE_DELIMITER = re.compile(r"^-- $", re.MULTILINE)
#: The same line in an HTML part's text, where a non-breaking space may stand for the space.
_HTML_SIGNATURE_DELIMITER = re.compile(r"^--[ \xa0]$", re.MULTILINE)
#: Put where the delimiter was before HTML is turned into text, which strips the space that
#: makes "-- " a delimiter; private-use characters no mail contains.
_SIGNATURE_MARK = "\ue000signature\ue000"
_QUOTED_HTML = (
    '//blockquote | //*[contains(concat(" ", normalize-space(@class), " "), " gmail_quote ")]'
)


@dataclass(frozen=True, slots=True)
class Attachment:
    filename: str
    content_type: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class ReceivedMail:
    sender: str
    sender_name: str
    #: The Message-ID header without its angle brackets; None when the sender set none.
    message_id: str | None
    subject: str
    #: The thread so far: References, else In-Reply-To, each without angle brackets.
    references: tuple[str, ...]
    text: str
    attachments: tuple[Attachment, ...] = field(default=())
    #: An automatic message (out-of-office, bounce, mailing list): never answered (RFC 3834).
    automatic: bool = False


def read_mail(raw: bytes) -> ReceivedMail:
    message = BytesParser(policy=policy.default).parsebytes(raw)
    assert isinstance(message, EmailMessage)  # policy.default builds EmailMessage
    sender_header = str(message.get("From", ""))
    subject = " ".join(str(message.get("Subject", "")).split())
    text = _new_text(message) or subject
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + _TRUNCATED
    return ReceivedMail(
        sender=bare_address(sender_header),
        sender_name=display_name(sender_header),
        message_id=_message_id(message.get("Message-ID")),
        subject=subject,
        references=_references(message),
        text=text,
        attachments=tuple(_attachments(message)),
        automatic=_is_automatic(message),
    )


def _message_id(value: object) -> str | None:
    text = str(value or "").strip().strip("<>").strip()
    return text or None


def _references(message: EmailMessage) -> tuple[str, ...]:
    ids = str(message.get("References", "")).split() or str(message.get("In-Reply-To", "")).split()
    return tuple(ref for ref in (_message_id(item) for item in ids) if ref)


def _is_automatic(message: EmailMessage) -> bool:
    auto = str(message.get("Auto-Submitted", "no")).strip().casefold()
    precedence = str(message.get("Precedence", "")).strip().casefold()
    return auto != "no" or precedence in {"bulk", "junk", "list", "auto_reply"}


def _new_text(message: EmailMessage) -> str:
    plain = message.get_body(preferencelist=("plain",))
    if plain is not None:
        text = _without_signature(_content(plain).replace("\r\n", "\n"))
    else:
        html = message.get_body(preferencelist=("html",))
        text = _html_to_text(_content(html)) if html is not None else ""
    reply: str = EmailReplyParser.parse_reply(text)
    return reply.strip()


def _without_signature(text: str) -> str:
    found = _SIGNATURE_DELIMITER.search(text)
    return text if found is None else text[: found.start()]


def _html_to_text(html: str) -> str:
    """The text of an HTML body without its quoted history (which in HTML mail is not marked
    with `>` but wrapped: `<blockquote>`, Gmail's `gmail_quote`)."""
    if not html.strip():
        return ""
    tree = html_text.parse_html(html)
    for quoted in tree.xpath(_QUOTED_HTML):
        if quoted.getparent() is not None:
            quoted.drop_tree()
    for element in tree.iter():
        # A delimiter is a text node of its own ("-- " before a <br>), or a line of a <pre>.
        if element.text and _HTML_SIGNATURE_DELIMITER.search(element.text):
            element.text = _HTML_SIGNATURE_DELIMITER.sub(_SIGNATURE_MARK, element.text)
        if element.tail and _HTML_SIGNATURE_DELIMITER.search(element.tail):
            element.tail = _HTML_SIGNATURE_DELIMITER.sub(_SIGNATURE_MARK, element.tail)
    # html-text folds whitespace (inside <pre> too), so the mark may not keep a line of its own.
    text = str(html_text.extract_text(tree))
    return text.partition(_SIGNATURE_MARK)[0]


def _content(part: Message) -> str:
    try:
        content = part.get_content()  # type: ignore[attr-defined]
    except (LookupError, ValueError):  # an unknown charset or a broken transfer encoding
        payload = part.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    return content if isinstance(content, str) else ""


def _attachments(message: EmailMessage) -> list[Attachment]:
    found: list[Attachment] = []
    for part in message.iter_attachments():
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes) or not payload:
            continue
        found.append(
            Attachment(
                filename=part.get_filename() or "",
                content_type=part.get_content_type(),
                payload=payload,
            )
        )
    return found
