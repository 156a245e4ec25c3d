"""Saving media users send, for channels that fetch it over plain HTTP (Twilio, WhatsApp).

A file is fetched with whatever authentication the platform wants (basic auth for Twilio, a
bearer token for WhatsApp), bounded in size and time, and written off the event loop to
`{data_dir}/media/<platform>/<chat>/<name>`; names are reduced to safe characters, so no
platform value can name a path outside that directory. A partial file is never left under
the final name.
"""

from __future__ import annotations

import asyncio
import hashlib
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from channels.errors import ChannelError

#: Larger files are not downloaded (MMS is at most 5 MB, WhatsApp media at most 100 MB).
DEFAULT_MAX_BYTES = 25 * 1024 * 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str, *, max_chars: int = 100) -> str:
    cleaned = _UNSAFE.sub("_", text).lstrip(".")[-max_chars:]
    return cleaned or "_"


def suffix_for(content_type: str) -> str:
    """A file suffix for a MIME type (".jpg" for image/jpeg), or "" when none is known."""
    guessed = mimetypes.guess_extension(content_type.partition(";")[0].strip()) or ""
    return ".jpg" if guessed == ".jpe" else guessed


@dataclass(frozen=True, slots=True)
class MediaStore:
    """Where one channel of one profile keeps what its users sent."""

    root: Path
    channel: str
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = 60.0

    @classmethod
    def under(cls, data_dir: Path, channel: str) -> MediaStore:
        return cls(data_dir / "media" / channel, channel)

    def path_for(self, chat_id: str, name: str) -> Path:
        return self.root / safe_name(chat_id) / safe_name(name)

    async def fetch(
        self,
        session: aiohttp.ClientSession,
        url: str,
        *,
        chat_id: str,
        name: str,
        headers: dict[str, str] | None = None,
        sha256: str | None = None,
    ) -> Path:
        """Download `url` and save it; the name gets a suffix from the content type if it has
        none. With `sha256` (hex), the bytes must have that digest. Raises `ChannelError` on any
        failure (status, size, digest, network, time)."""
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                session.get(url, headers=headers) as response,
            ):
                if response.status != 200:
                    raise ChannelError(
                        f"media download: HTTP {response.status}", channel=self.channel
                    )
                data = bytearray()
                async for block in response.content.iter_chunked(64 * 1024):
                    data.extend(block)
                    if len(data) > self.max_bytes:
                        raise ChannelError(
                            f"media larger than {self.max_bytes} bytes", channel=self.channel
                        )
                content_type = response.content_type
        except (aiohttp.ClientError, OSError) as error:
            raise ChannelError(f"media download failed: {error!r}", channel=self.channel) from error
        except TimeoutError as error:
            raise ChannelError(
                f"media download took over {self.timeout_s:g} s", channel=self.channel
            ) from error
        if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256.lower():
            raise ChannelError(
                "media download: the SHA-256 digest does not match", channel=self.channel
            )
        if not Path(name).suffix:
            name += suffix_for(content_type)
        target = self.path_for(chat_id, name)
        await asyncio.to_thread(_write_file, target, bytes(data))
        return target


def _write_file(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    partial.write_bytes(data)
    partial.replace(target)


async def read_file(path_text: str, *, channel: str) -> bytes:
    """An outbound media file, read off the event loop."""
    path = Path(path_text)
    try:
        return await asyncio.to_thread(path.read_bytes)
    except OSError as error:
        raise ChannelError(
            f"cannot read media file {path}: {error.strerror}",
            channel=channel,
            suggestion="the agent must pass paths this process can read",
        ) from error
