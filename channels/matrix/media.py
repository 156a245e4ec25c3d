"""Files users post in Matrix (`m.image`, `m.file`, `m.audio`, `m.video`), fetched for the agent.

Each is downloaded through the homeserver (authenticated media, `mxc://` URIs) and saved under
`{data_dir}/media/matrix/<room>/`, written in a worker thread, never on the event loop. Only
allowed senders' files are fetched; one that cannot be fetched is logged and left out.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import structlog
from nio import AsyncClient, MemoryDownloadResponse

from channels.errors import ChannelError
from channels.matrix.errors import matrix_call
from channels.matrix.inbound import MatrixPost

log = structlog.get_logger(__name__)

MAX_DOWNLOAD_BYTES = 25 * 1024 * 1024
_DEFAULT_SUFFIX = {"m.image": ".jpg", "m.video": ".mp4", "m.audio": ".ogg", "m.file": ""}
_SAFE_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def local_path(data_dir: Path, post: MatrixPost) -> Path:
    suffix = _DEFAULT_SUFFIX.get(post.msgtype, "")
    if post.file_name and _SAFE_SUFFIX.fullmatch(Path(post.file_name).suffix):
        suffix = Path(post.file_name).suffix.lower()
    room = _UNSAFE.sub("_", post.room_id).strip("._") or "_"
    name = _UNSAFE.sub("_", post.event_id).strip("._") or "event"
    return data_dir / "media" / "matrix" / room / f"{name}{suffix}"


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(data)
    partial.replace(path)


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
    if len(data) > MAX_DOWNLOAD_BYTES:
        log.warning("matrix.media_too_large", event_id=post.event_id, size=len(data))
        return None
    path = local_path(data_dir, post)
    await asyncio.to_thread(_write, path, data)
    return str(path)
