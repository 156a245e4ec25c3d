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

import hashlib
import mimetypes
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import getaddresses, parseaddr
from functools import partial
from pathlib import Path

import html_text
from email_reply_parser import EmailReplyParser

from bus import Attachment as ReplyAttachment
from bus import InboundMessage
from channels.errors import ChannelError
from channels.media_files import MediaIntake, media_root, read_file, safe_name, save_media


# Email addresses as the channel uses them: bare and lower-case.
#
# The allow list (addresses, `*@domain`) is `channels.access.allow.AllowList`, like every channel's.
def bare_address(header_value: str) -> str:
    """The address of a From/To header (`"Alice" <Alice@Example.org>` -> alice@example.org).

    Empty when there is none. Lower-cased as a whole: the local part is case-sensitive only
    in theory, and every real mail system treats it as case-insensitive.
    """
    _name, address = parseaddr(header_value)
    address = address.strip()
    return address.casefold() if "@" in address else ""


def display_name(header_value: str) -> str:
    name, _address = parseaddr(header_value)
    return name.strip()


def all_addresses(header_values: Iterable[str]) -> list[str]:
    return [address.casefold() for _name, address in getaddresses(list(header_values)) if address]


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


# Attachments in both directions: files users send are saved, files the agent sends attached.
#
# Received attachments are saved under `{data_dir}/media/email/<sender>/` by
# `channels.media_files` (only for allowed senders: the channel does not store a stranger's
# files) and handed to the agent as paths; one over the profile's `max_media_bytes` is named in
# the message's text instead.
# Disk reads and writes run in a worker thread, never on the event loop.
CHANNEL = "email"
#: Attachments larger than this are not saved (the agent is told); 25 MB is what most
#: providers accept in one email.
MAX_ATTACHMENT_BYTES = 25 * 1024 * 1024
#: A suffix keeps only its safe characters (".p d f" is ".pdf").
_UNSAFE_IN_SUFFIX = re.compile(r"[^A-Za-z0-9._@-]+")


def media_dir(data_dir: Path, sender: str) -> Path:
    return media_root(data_dir, CHANNEL) / safe_name(
        sender, keep="@", trim_ends="._", max_chars=None
    )


def local_name(prefix: str, index: int, attachment: Attachment) -> str:
    name = Path(attachment.filename).name if attachment.filename else ""
    stem = safe_name(Path(name).stem, keep="@", trim_ends="._", max_chars=None, fallback="")[:60]
    suffix = _UNSAFE_IN_SUFFIX.sub("", Path(name).suffix)[:11].lower()
    if not suffix:
        suffix = mimetypes.guess_extension(attachment.content_type) or ".bin"
    return f"{prefix}-{index}-{stem or 'attachment'}{suffix}"


async def receive_attachments(
    message: InboundMessage,
    directory: Path,
    attachments: tuple[Attachment, ...],
    max_bytes: int,
) -> InboundMessage:
    """`message` with `attachments` saved in `directory`, and those over `max_bytes` (or 25 MB)
    or that cannot be written named in its text."""
    prefix = hashlib.sha256((message.message_id or "").encode()).hexdigest()[:16]
    intake = MediaIntake(message, min(max_bytes, MAX_ATTACHMENT_BYTES))
    for index, attachment in enumerate(attachments, start=1):
        await intake.take(
            partial(_save, directory / local_name(prefix, index, attachment), attachment.payload),
            name=attachment.filename or None,
            mime=attachment.content_type,
            size=len(attachment.payload),
        )
    return intake.message()


async def _save(path: Path, data: bytes) -> Path:
    try:
        return await save_media(path, data)
    except OSError as error:
        raise ChannelError(f"it could not be saved: {error.strerror}", channel=CHANNEL) from error


@dataclass(frozen=True, slots=True)
class OutgoingFile:
    name: str
    maintype: str
    subtype: str
    data: bytes


async def _read_file(text: str, name: str | None = None, mime: str | None = None) -> OutgoingFile:
    data = await read_file(
        text,
        channel=CHANNEL,
        max_bytes=MAX_ATTACHMENT_BYTES,
        limit_note="email takes attachments up to 25 MB",
    )
    name = name or Path(text).name
    content_type = mime or mimetypes.guess_type(name)[0] or "application/octet-stream"
    maintype, _, subtype = content_type.partition("/")
    return OutgoingFile(name, maintype, subtype, data)


async def attach_files(
    message: EmailMessage, paths: list[str], attachments: Sequence[ReplyAttachment] = ()
) -> None:
    """Attach local files (`paths`: a tool's `media`) and a reply's `attachments`."""
    files = [await _read_file(text) for text in paths]
    for attachment in attachments:
        files.append(await _read_file(attachment.path, attachment.name, attachment.mime))
    for outgoing in files:
        message.add_attachment(
            outgoing.data,
            maintype=outgoing.maintype,
            subtype=outgoing.subtype,
            filename=outgoing.name,
        )
