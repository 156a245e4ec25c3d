"""Files users send the bot, downloaded from LINE's data API (`data_api_base_url`).

Images, video, audio and files are not in the webhook: their bytes are fetched with the blob
API (`GET /v2/bot/message/{id}/content`) and saved under `{data_dir}/media/line/<chat_id>/`
by `channels.media_files`, off the event loop. Only allowed senders' files are fetched.
"""

from __future__ import annotations

from pathlib import Path

import structlog
from linebot.v3.messaging import AsyncMessagingApiBlob

from channels.errors import ChannelError
from channels.line.errors import line_call
from channels.line.events import LinePost
from channels.media_files import media_root, safe_name, safe_suffix, save_within

log = structlog.get_logger(__name__)

#: Larger files are not kept (the SDK reads a download whole into memory).
MAX_DOWNLOAD_BYTES = 25 * 1024 * 1024
_DEFAULT_SUFFIX = {"image": ".jpg", "video": ".mp4", "audio": ".m4a", "file": ""}


def local_path(data_dir: Path, post: LinePost) -> Path:
    suffix = safe_suffix(post.file_name) or _DEFAULT_SUFFIX.get(post.media_kind or "", "")
    chat = safe_name(post.chat_id, max_chars=None)
    name = safe_name(post.message_id, max_chars=None, fallback="")
    return media_root(data_dir, "line") / chat / f"{name}{suffix}"


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
    target = local_path(data_dir, post)
    return await save_within(
        target, data, MAX_DOWNLOAD_BYTES, channel="line", message_id=post.message_id
    )
