"""Files users send the bot, downloaded from LINE's data API (`data_api_base_url`).

Images, video, audio and files are not in the webhook: their bytes are fetched with the blob
API (`GET /v2/bot/message/{id}/content`) and saved under `{data_dir}/media/line/<chat_id>/`,
written in a worker thread, never on the event loop. Only allowed senders' files are fetched.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import structlog
from linebot.v3.messaging import AsyncMessagingApiBlob

from channels.errors import ChannelError
from channels.line.errors import line_call
from channels.line.events import LinePost

log = structlog.get_logger(__name__)

#: Larger files are not kept (the SDK reads a download whole into memory).
MAX_DOWNLOAD_BYTES = 25 * 1024 * 1024
_DEFAULT_SUFFIX = {"image": ".jpg", "video": ".mp4", "audio": ".m4a", "file": ""}
_SAFE_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def local_path(data_dir: Path, post: LinePost) -> Path:
    suffix = _DEFAULT_SUFFIX.get(post.media_kind or "", "")
    if post.file_name and _SAFE_SUFFIX.fullmatch(Path(post.file_name).suffix):
        suffix = Path(post.file_name).suffix.lower()
    chat = _UNSAFE.sub("_", post.chat_id) or "_"
    return data_dir / "media" / "line" / chat / f"{_UNSAFE.sub('_', post.message_id)}{suffix}"


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(data)
    partial.replace(path)


async def download(
    blob: AsyncMessagingApiBlob, post: LinePost, data_dir: Path, *, timeout_s: float
) -> str | None:
    """The saved file's path, or None when it could not be fetched (logged)."""
    try:
        async with line_call("get_message_content", timeout_s):
            data = bytes(await blob.get_message_content(post.message_id))
    except ChannelError as error:
        log.warning("line.media_download_failed", message_id=post.message_id, error=str(error))
        return None
    if len(data) > MAX_DOWNLOAD_BYTES:
        log.warning("line.media_too_large", message_id=post.message_id, size=len(data))
        return None
    path = local_path(data_dir, post)
    await asyncio.to_thread(_write, path, data)
    return str(path)
