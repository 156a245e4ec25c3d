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
from pathlib import Path

import aiohttp
import structlog

from channels.errors import ChannelError
from channels.media_files import MediaStore, read_file, safe_file_name
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
        self._store = MediaStore.under(data_dir, CHANNEL, max_bytes=max_bytes, timeout_s=timeout_s)
        self.root = self._store.root
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self._bot_token = bot_token
        self._proxy = proxy

    async def save_all(self, channel_id: str, files: Sequence[SlackFile]) -> list[str]:
        """Paths of the saved files; one that cannot be fetched is logged and left out."""
        if not files:
            return []
        paths: list[str] = []
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        headers = {"Authorization": f"Bearer {self._bot_token}"}
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            for file in files:
                path = await self._save(session, channel_id, file)
                if path is not None:
                    paths.append(str(path))
        return paths

    async def _save(
        self, session: aiohttp.ClientSession, channel_id: str, file: SlackFile
    ) -> Path | None:
        if not self._store.admits(file.size, file_id=file.id):
            return None
        try:
            data = await self._download(session, file)
        except (aiohttp.ClientError, OSError, TimeoutError, ChannelError) as error:
            log.warning("slack.file_download_failed", file_id=file.id, error=str(error))
            return None
        target = self.root / safe_file_name(channel_id) / f"{file.id}_{safe_file_name(file.name)}"
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
                if len(data) > self.max_bytes:
                    raise ChannelError(f"larger than {self.max_bytes} bytes", channel=CHANNEL)
            return bytes(data)


async def read_uploads(paths: Sequence[str]) -> list[dict[str, object]]:
    """Outbound media paths read off the event loop, as `files_upload_v2`'s `file_uploads`."""
    uploads: list[dict[str, object]] = []
    for path in map(Path, paths):
        data = await read_file(str(path), channel=CHANNEL)
        uploads.append({"file": data, "filename": path.name, "title": path.name})
    return uploads
