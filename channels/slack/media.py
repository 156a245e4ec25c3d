"""Files both ways: files users share are saved for the agent; media paths go out as uploads.

Inbound files are fetched from their `url_private` with the bot token (Slack answers a request
without it with its HTML sign-in page and status 200, so an HTML answer counts as a failure)
into `{data_dir}/media/slack/<channel>/<file id>_<name>`, saved by `channels.media_files`
(safe names, size limit). Outbound media is uploaded
with `files_upload_v2` (files.getUploadURLExternal, the upload itself, then
files.completeUploadExternal). All file-system work runs off the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import aiohttp
import structlog

from bus import InboundMessage
from channels.errors import ChannelError
from channels.media_files import MediaStore, read_file, safe_file_name
from channels.media_info import too_large_reason
from channels.slack.errors import CHANNEL
from channels.slack.inbound import SlackFile

log = structlog.get_logger(__name__)

#: Slack's "files.getUploadURLExternal": "the maximum file size is 1 GB".
MAX_UPLOAD_BYTES = 1024 * 1024 * 1024

#: Files larger than this are not downloaded (Slack allows up to 1 GB).
DEFAULT_MAX_FILE_BYTES = 25 * 1024 * 1024


class FileStore:
    """Saves the files of received posts under one profile's data directory."""

    def __init__(
        self,
        data_dir: Path,
        bot_token: str,
        *,
        proxy: str | None = None,
        max_bytes: int = DEFAULT_MAX_FILE_BYTES,
        timeout_s: float = 60.0,
    ) -> None:
        self._store = MediaStore(data_dir, CHANNEL, max_bytes=max_bytes, timeout_s=timeout_s)
        self._bot_token = bot_token
        self._proxy = proxy

    async def receive(
        self, message: InboundMessage, files: Sequence[SlackFile], max_bytes: int
    ) -> InboundMessage:
        """`message` with `files` saved, and those over `max_bytes` (or the store's own limit)
        or that cannot be fetched named in its text."""
        intake = self._store.intake(message, max_bytes)
        headers = {"Authorization": f"Bearer {self._bot_token}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            for file in files:
                await intake.take(
                    partial(self._save, session, message.chat_id, file),
                    name=file.name,
                    mime=file.mimetype or None,
                    size=file.size,
                    duration_s=file.duration_s,
                )
        return intake.message()

    async def _save(self, session: aiohttp.ClientSession, channel_id: str, file: SlackFile) -> Path:
        try:
            data = await self._download(session, file)
        except (aiohttp.ClientError, OSError) as error:
            raise ChannelError(f"the download failed: {error!r}", channel=CHANNEL) from error
        target = (
            self._store.root / safe_file_name(channel_id) / f"{file.id}_{safe_file_name(file.name)}"
        )
        return await self._store.save(target, data)

    async def _download(self, session: aiohttp.ClientSession, file: SlackFile) -> bytes:
        async with session.get(file.url, proxy=self._proxy) as response:
            if response.status != 200:
                raise ChannelError(f"HTTP {response.status}", channel=CHANNEL)
            if response.content_type == "text/html" and not file.mimetype.startswith("text/html"):
                raise ChannelError(
                    "Slack answered with a sign-in page",
                    channel=CHANNEL,
                    suggestion="give the app the files:read scope",
                )
            data = bytearray()
            async for block in response.content.iter_chunked(64 * 1024):
                data.extend(block)
                if not self._store.fits(len(data)):
                    raise ChannelError(too_large_reason(self._store.max_bytes), channel=CHANNEL)
            return bytes(data)


async def read_uploads(paths: Sequence[str]) -> list[dict[str, object]]:
    """Outbound media paths read off the event loop, as `files_upload_v2`'s `file_uploads`."""
    uploads: list[dict[str, object]] = []
    for path in map(Path, paths):
        data = await read_file(str(path), channel=CHANNEL)
        uploads.append({"file": data, "filename": path.name, "title": path.name})
    return uploads
