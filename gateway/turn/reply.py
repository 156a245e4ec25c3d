"""The reply: what answers a message, as the `OutboundMessage` the channels send, and the files
it carries (`keep_reply_files`).

Every reply names what it answers the same way, whoever built it (a turn, a command, a notice,
one process or the cluster): `reply_to` is the message it answers (the last, for messages
collected into one turn), the `ANSWERS` metadata every platform id it answers, `SESSION` the
session it belongs to, and `FAILED` marks an apology rather than an answer.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

import aiohttp
import structlog

from bus import (
    ANSWERS,
    CALLBACK,
    FAILED,
    SESSION,
    USAGE,
    Attachment,
    ButtonRows,
    InboundMessage,
    OutboundMessage,
    TokenUsage,
)
from bus.text import scrub_surrogates
from channels.media_files import (
    MEDIA_DIR,
    safe_file_name,
    safe_name,
    safe_suffix,
    save_media,
    suffix_for,
)
from channels.media_info import kind_for, mime_for, too_large_reason
from gateway.agents.base import ReplyFile

log = structlog.get_logger(__name__)

FAILED_TURN_REPLY = "Sorry, I could not answer that: {reason}. Please try again later."
#: What a request held open for a message that a stop or an interrupt dropped is answered.
CANCELLED_NOTICE = "Cancelled: a stop or a newer message ended this turn before its reply."


def reply_message(
    trigger: InboundMessage,
    text: str,
    *,
    answers: list[str],
    session: str | None = None,
    failed: bool = False,
    delivery_id: str | None = None,
    stream_id: str | None = None,
    buttons: ButtonRows | None = None,
    usage: TokenUsage | None = None,
    attachments: Sequence[Attachment] = (),
) -> OutboundMessage:
    """The reply to `trigger` saying `text`; `answers` are the platform ids of every message it
    answers (`platform_ids`). `delivery_id` keeps a resend from showing twice (a turn's id);
    `stream_id` makes it a snapshot or the final text of the turn's streamed reply; `buttons`
    go under it."""
    metadata: dict[str, object] = {ANSWERS: answers} if answers else {}
    if session is not None:
        metadata[SESSION] = session
    if failed:
        metadata[FAILED] = True
    if usage is not None and usage.total:
        metadata[USAGE] = usage.to_dict()
    return OutboundMessage(
        channel=trigger.channel,
        chat_id=trigger.chat_id,
        content=scrub_surrogates(text),
        # A tap's id names an interaction, which no platform lets a message reply to.
        reply_to=None if CALLBACK in trigger.metadata else trigger.shown_id(),
        metadata=metadata,
        stream_id=stream_id,
        delivery_id=delivery_id,
        buttons=buttons or [],
        attachments=list(attachments),
    )


def platform_ids(messages: Sequence[InboundMessage]) -> list[str]:
    """The platform ids of `messages`, in order (a message without one has none to answer;
    an edit answers the message it edits)."""
    if len(messages) == 1:
        shown = messages[0].shown_id()
        return [shown] if shown else []
    return [shown for message in messages if (shown := message.shown_id())]


def failure_reason(error: Exception) -> str:
    """What the user and the turn's record are told of `error`."""
    return f"{type(error).__name__}: {error}"


def failed_reply(error: Exception) -> str:
    """The apology for a turn or a command that raised `error`, naming the reason."""
    return FAILED_TURN_REPLY.format(reason=failure_reason(error))


async def command_reply(name: str, running: Awaitable[str]) -> str:
    """The reply of the command `name` as `running` gives it, or the apology when it fails: a
    command is always answered, never left open."""
    try:
        return await running
    except Exception as error:
        # Supervision point (per message): the user is told, the operator gets the traceback.
        log.exception("turn.command_failed", command=name)
        return failed_reply(error)


# A reply's files: what the agent named (a URL, base64 bytes), kept as files of the profile
# before the turn's outcome is recorded, so the outcome names bytes the gateway has: a resend
# after a crash sends the same file, and a file that cannot be had is known before anything
# is sent.

#: Under the profile's media directory: `out/<turn id>/<n>-<name>`.
REPLY_FILES_DIR = "out"
#: Longest the fetch of one file an agent names may take.
REPLY_FILE_TIMEOUT_S = 60.0
UNSENT_FILE_NOTE = "({name} could not be sent: {reason}.)"
_FETCH_BLOCK = 64 * 1024


class _Unsent(Exception):
    """Why a file the agent named cannot be sent."""


@dataclass(frozen=True, slots=True)
class KeptFiles:
    attachments: list[Attachment] = field(default_factory=list)
    #: One note a file that could not be kept, for the reply's text (`with_notes`).
    notes: list[str] = field(default_factory=list)

    def with_notes(self, text: str) -> str:
        """The reply's text with the notes of the files that could not be sent after it."""
        return "\n\n".join(part for part in (text, *self.notes) if part)


def reply_files_dir(root: Path, turn_id: str) -> Path:
    """Where the files of one turn's reply are kept, under the profile's directory `root`."""
    return root / MEDIA_DIR / REPLY_FILES_DIR / safe_name(turn_id)


async def keep_reply_files(
    files: Sequence[ReplyFile],
    directory: Path,
    *,
    max_bytes: int,
    channel: str,
    turn_id: str,
    timeout_s: float = REPLY_FILE_TIMEOUT_S,
) -> KeptFiles:
    """Each of `files` fetched (http(s) only, 2xx only, at most `max_bytes`, within
    `timeout_s`) or decoded into `directory`; one that cannot be is logged (with the channel and
    the turn) and named in a note instead."""
    kept = KeptFiles()
    if not files:
        return kept
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for number, file in enumerate(files, start=1):
            shown = file.name or file.caption or _name_in_url(file.url) or "a file"
            try:
                data, mime, name = await _file_bytes(session, file, max_bytes, timeout_s)
            except _Unsent as unsent:
                log.warning(
                    "turn.reply_file_unsent",
                    channel=channel,
                    turn=turn_id,
                    file=shown,
                    reason=str(unsent),
                )
                kept.notes.append(UNSENT_FILE_NOTE.format(name=shown, reason=unsent))
                continue
            path = await save_media(directory / f"{number}-{name}", data)
            kept.attachments.append(
                Attachment(
                    kind=kind_for(mime),
                    mime=mime,
                    name=name,
                    size=len(data),
                    sha256=hashlib.sha256(data).hexdigest(),
                    path=str(path),
                    url=file.url,
                    caption=file.caption,
                )
            )
    return kept


async def _file_bytes(
    session: aiohttp.ClientSession, file: ReplyFile, max_bytes: int, timeout_s: float
) -> tuple[bytes, str, str]:
    """The file's bytes, MIME type and safe name; raises `_Unsent`."""
    served_type: str | None = None
    if file.data is not None:
        try:
            data = await asyncio.to_thread(base64.b64decode, file.data, validate=True)
        except binascii.Error:
            raise _Unsent("its data is not base64") from None
        if len(data) > max_bytes:
            raise _Unsent(f"it is {too_large_reason(max_bytes)}")
    elif file.url is not None:
        data, served_type = await _fetch(session, file.url, max_bytes, timeout_s)
    else:
        raise _Unsent("it has neither a url nor data")
    name = safe_file_name(file.name or _name_in_url(file.url) or "file")
    mime = file.mime or (served_type if served_type not in _UNTYPED else None)
    if mime is None or "/" not in mime:
        mime = mime_for(name)
    mime = mime.partition(";")[0].strip().lower()
    if not safe_suffix(name):
        name += suffix_for(mime)
    return data, mime, name


_UNTYPED = frozenset({None, "", "application/octet-stream"})


async def _fetch(
    session: aiohttp.ClientSession, url: str, max_bytes: int, timeout_s: float
) -> tuple[bytes, str | None]:
    if urlsplit(url).scheme.lower() not in ("http", "https"):
        raise _Unsent("only http(s) URLs are fetched")
    try:
        async with session.get(url) as response:
            if not 200 <= response.status < 300:
                raise _Unsent(f"HTTP {response.status}")
            if response.content_length is not None and response.content_length > max_bytes:
                raise _Unsent(f"it is {too_large_reason(max_bytes)}")
            data = bytearray()
            async for block in response.content.iter_chunked(_FETCH_BLOCK):
                data.extend(block)
                if len(data) > max_bytes:
                    raise _Unsent(f"it is {too_large_reason(max_bytes)}")
            return bytes(data), response.content_type
    except TimeoutError:
        raise _Unsent(f"the download took over {timeout_s:g} s") from None
    except (aiohttp.ClientError, ValueError) as error:
        raise _Unsent(f"the download failed ({type(error).__name__})") from None


def _name_in_url(url: str | None) -> str | None:
    if not url:
        return None
    return unquote(PurePosixPath(urlsplit(url).path).name) or None
