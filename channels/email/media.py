"""Attachments in both directions: files users send are saved, files the agent sends attached.

Received attachments are saved under `{data_dir}/media/email/<sender>/` by
`channels.media_files` (only for allowed senders: the channel does not store a stranger's
files) and handed to the agent as paths.
Disk reads and writes run in a worker thread, never on the event loop.
"""

from __future__ import annotations

import hashlib
import mimetypes
import re
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path

from channels.email.reading import Attachment
from channels.media_files import media_root, read_file, safe_name, save_media

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


async def save_attachments(
    directory: Path, message_key: str, attachments: tuple[Attachment, ...]
) -> tuple[list[str], list[str]]:
    """Saved paths, and a note for each attachment that was not saved."""
    prefix = hashlib.sha256(message_key.encode()).hexdigest()[:16]
    paths: list[str] = []
    errors: list[str] = []
    for index, attachment in enumerate(attachments, start=1):
        if len(attachment.payload) > MAX_ATTACHMENT_BYTES:
            errors.append(f"{attachment.filename or 'attachment'}: over 25 MB, not saved")
            continue
        path = directory / local_name(prefix, index, attachment)
        try:
            await save_media(path, attachment.payload)
        except OSError as exc:
            errors.append(f"{attachment.filename or 'attachment'}: {exc}")
            continue
        paths.append(str(path))
    return paths, errors


@dataclass(frozen=True, slots=True)
class OutgoingFile:
    name: str
    maintype: str
    subtype: str
    data: bytes


async def _read_file(text: str) -> OutgoingFile:
    data = await read_file(
        text,
        channel=CHANNEL,
        max_bytes=MAX_ATTACHMENT_BYTES,
        limit_note="email takes attachments up to 25 MB",
    )
    name = Path(text).name
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    maintype, _, subtype = content_type.partition("/")
    return OutgoingFile(name, maintype, subtype, data)


async def attach_files(message: EmailMessage, paths: list[str]) -> None:
    for text in paths:
        outgoing = await _read_file(text)
        message.add_attachment(
            outgoing.data,
            maintype=outgoing.maintype,
            subtype=outgoing.subtype,
            filename=outgoing.name,
        )
