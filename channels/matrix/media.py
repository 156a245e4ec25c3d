"""Files users post in Matrix (`m.image`, `m.file`, `m.audio`, `m.video`), fetched for the agent.

Each is downloaded through the homeserver (authenticated media, `mxc://` URIs) and saved under
`{data_dir}/media/matrix/<room>/` by `channels.media_files`, off the event loop. Only
allowed senders' files are fetched; one that cannot be fetched is logged and left out.
"""

from __future__ import annotations

from pathlib import Path

import structlog
from nio import AsyncClient, MemoryDownloadResponse

from channels.errors import ChannelError
from channels.matrix.errors import matrix_call
from channels.matrix.inbound import MatrixPost
from channels.media_files import media_root, safe_name, safe_suffix, save_within

log = structlog.get_logger(__name__)

MAX_DOWNLOAD_BYTES = 25 * 1024 * 1024
_DEFAULT_SUFFIX = {"m.image": ".jpg", "m.video": ".mp4", "m.audio": ".ogg", "m.file": ""}


def local_path(data_dir: Path, post: MatrixPost) -> Path:
    suffix = safe_suffix(post.file_name) or _DEFAULT_SUFFIX.get(post.msgtype, "")
    room = safe_name(post.room_id, trim_ends="._", max_chars=None)
    name = safe_name(post.event_id, trim_ends="._", max_chars=None, fallback="event")
    return media_root(data_dir, "matrix") / room / f"{name}{suffix}"


async def download(
    client: AsyncClient, post: MatrixPost, data_dir: Path, *, timeout_s: float
) -> str | None:
    """The saved file's path, or None when it could not be fetched (logged)."""
    if post.media_url is None:
        return None
    try:
        async with matrix_call("download", timeout_s):
            response = await client.download(mxc=post.media_url)
    except ChannelError as error:
        log.warning("matrix.media_download_failed", event_id=post.event_id, error=str(error))
        return None
    if not isinstance(response, MemoryDownloadResponse):
        log.warning("matrix.media_download_failed", event_id=post.event_id, error=str(response))
        return None
    data = bytes(response.body)
    target = local_path(data_dir, post)
    return await save_within(
        target, data, MAX_DOWNLOAD_BYTES, channel="matrix", event_id=post.event_id
    )
