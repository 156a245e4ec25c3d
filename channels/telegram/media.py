"""Files in both directions: downloads of what users send, uploads of what the agent sends.

Received files are saved under `{data_dir}/media/telegram/<chat_id>/` by
`channels.media_files` and handed to the agent as paths. Disk reads and writes run in a worker
thread, never on the event loop (PTB's own `File.download_to_drive` writes synchronously, so it
is not used).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog
from telegram import Bot, InputFile

from channels.errors import ChannelError
from channels.media_files import (
    media_root,
    read_file,
    safe_name,
    safe_suffix,
    save_media,
)
from channels.media_info import MediaKind, too_large_reason
from channels.telegram.errors import CHANNEL, translated
from channels.telegram.updates import MediaRef

log = structlog.get_logger(__name__)

#: The Bot API serves files up to 20 MB through getFile; larger ones cannot be fetched.
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024
#: The Bot API accepts photos up to 10 MB; anything larger goes as a document.
MAX_PHOTO_BYTES = 10 * 1024 * 1024
MAX_UPLOAD_BYTES = 50 * 1024 * 1024
PHOTO_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp"})

_DEFAULT_SUFFIX = {
    "photo": ".jpg",
    "voice": ".ogg",
    "video": ".mp4",
    "video_note": ".mp4",
    "animation": ".mp4",
}


def media_dir(data_dir: Path, chat_id: str) -> Path:
    # Chat ids are integers (negative for groups); anything else is made safe for a path.
    return media_root(data_dir, CHANNEL) / safe_name(chat_id, max_chars=None)


def local_name(ref: MediaRef, message_id: int, server_path: str | None) -> str:
    """A file name that is unique in its chat and keeps a document's own name readable."""
    suffix = safe_suffix(ref.file_name) or safe_suffix(server_path)
    suffix = suffix or _DEFAULT_SUFFIX.get(ref.kind, "")
    stem = ""
    if ref.file_name:
        stem = safe_name(Path(ref.file_name).stem, trim_ends="._", max_chars=None, fallback="")
    return f"{message_id}-{stem[:60] or ref.file_unique_id}{suffix}"


#: What the agent is told a Telegram attachment is, by its kind.
MEDIA_KINDS: dict[str, MediaKind] = {
    "photo": "image",
    "voice": "audio",
    "audio": "audio",
    "video": "video",
    "video_note": "video",
    "animation": "video",
    "document": "file",
}


def refusal(ref: MediaRef, max_bytes: int) -> str | None:
    """Why `ref` is not downloaded before trying (its size, as Telegram states it), or None."""
    if ref.file_size is None:
        return None
    if ref.file_size > max_bytes:
        return too_large_reason(max_bytes)
    if ref.file_size > MAX_DOWNLOAD_BYTES:
        return "larger than the 20 MB the Telegram Bot API lets bots download"
    return None


async def download(
    bot: Bot, ref: MediaRef, directory: Path, message_id: int, *, timeout_s: float, max_bytes: int
) -> Path:
    """Fetch one file from Telegram and save it; raises a channel error on failure (the
    reason the agent is told)."""
    with translated("getFile"):
        remote = await bot.get_file(ref.file_id)
    if remote.file_size is not None and remote.file_size > max_bytes:
        raise ChannelError(too_large_reason(max_bytes), channel=CHANNEL)
    with translated("download file"):
        data = await remote.download_as_bytearray(read_timeout=timeout_s)
    if len(data) > max_bytes:
        raise ChannelError(too_large_reason(max_bytes), channel=CHANNEL)
    path = directory / local_name(ref, message_id, remote.file_path)
    return await save_media(path, bytes(data))


@dataclass(frozen=True, slots=True)
class Upload:
    """A local file read for sending, and whether Telegram should show it as a photo."""

    file: InputFile
    as_photo: bool


async def load_upload(path_text: str) -> Upload:
    path = Path(path_text)
    data = await read_file(
        path_text,
        channel=CHANNEL,
        max_bytes=MAX_UPLOAD_BYTES,
        limit_note="the Bot API takes files up to 50 MB",
    )
    as_photo = path.suffix.lower() in PHOTO_SUFFIXES and len(data) <= MAX_PHOTO_BYTES
    return Upload(InputFile(data, filename=path.name), as_photo)
