"""Files both ways: attachments users send are saved for the agent; media paths go out as files.

Inbound attachments land in `{data_dir}/media/discord/<channel_id>/<attachment id>_<name>`,
saved by `channels.media_files` (safe names, size limit, off the event loop).
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import discord
import structlog

from channels.media_files import MediaStore, read_file, safe_file_name

log = structlog.get_logger(__name__)

#: Discord takes at most ten files per message.
MAX_FILES_PER_MESSAGE = 10
#: Discord's default upload limit; larger attachments are not downloaded.
DEFAULT_MAX_ATTACHMENT_BYTES = 25 * 1024 * 1024


class AttachmentStore:
    """Saves the attachments of received messages under one profile's data directory."""

    def __init__(
        self,
        data_dir: Path,
        *,
        max_bytes: int = DEFAULT_MAX_ATTACHMENT_BYTES,
        timeout_s: float = 60.0,
    ) -> None:
        self._store = MediaStore.under(
            data_dir, "discord", max_bytes=max_bytes, timeout_s=timeout_s
        )
        self.root = self._store.root
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def save_all(self, message: discord.Message) -> list[str]:
        """Paths of the saved attachments; one that cannot be fetched is logged and left out."""
        paths: list[str] = []
        for attachment in message.attachments:
            path = await self._save(message.channel.id, attachment)
            if path is not None:
                paths.append(str(path))
        return paths

    async def _save(self, channel_id: int, attachment: discord.Attachment) -> Path | None:
        if not self._store.admits(attachment.size, attachment_id=attachment.id):
            return None
        try:
            async with asyncio.timeout(self.timeout_s):
                data = await attachment.read()
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as error:
            log.warning(
                "discord.attachment_download_failed", attachment_id=attachment.id, error=repr(error)
            )
            return None
        target = (
            self.root / str(channel_id) / f"{attachment.id}_{safe_file_name(attachment.filename)}"
        )
        return await self._store.save(target, data)


async def load_files(paths: Sequence[str]) -> list[discord.File]:
    """Outbound media paths read into memory off the event loop, ready to upload."""
    files: list[discord.File] = []
    for path in map(Path, paths):
        data = await read_file(str(path), channel="discord")
        files.append(discord.File(io.BytesIO(data), filename=path.name))
    return files


def batches(files: Sequence[discord.File]) -> list[list[discord.File]]:
    """Files grouped as Discord accepts them, at most ten to a message."""
    return [
        list(files[start : start + MAX_FILES_PER_MESSAGE])
        for start in range(0, len(files), MAX_FILES_PER_MESSAGE)
    ]
