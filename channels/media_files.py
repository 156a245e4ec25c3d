"""Saving media users send: the one helper every channel uses, so every file lands safely.

Every file a user sends is written off the event loop to `{data_dir}/media/<platform>/<chat>/
<name>`: names are reduced to safe characters (`safe_name`), so no platform value can name a
path outside that directory; a size limit (`MediaStore.max_bytes`) is checked before or while
downloading; a partial file is never left under the final name. Channels that fetch over
plain HTTP (Twilio, WhatsApp) use `MediaStore.fetch`; those whose SDK downloads (Discord,
Slack, Telegram, LINE, Matrix, email) compute the name and call `MediaStore.save`. Only
allowed senders' media is fetched (`Channel.is_allowed`).

`MediaIntake` is how one received message's files are taken (a store's `intake` makes one
within its limits): a file over the profile's `max_media_bytes` is not fetched, a fetch that
fails or times out is given up, and each such file is named in the message's text by a
placeholder (`channels.media_info.not_downloaded`); the saved ones keep their name, type and
duration for the agent.
"""

from __future__ import annotations

import asyncio
import hashlib
import mimetypes
import re
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass
from functools import cache
from pathlib import Path

import aiohttp
import structlog

from bus import InboundMessage
from channels.errors import ChannelError
from channels.media_info import (
    MediaKind,
    kind_for,
    mime_for,
    not_downloaded,
    record_details,
    too_large_reason,
    with_placeholders,
)

log = structlog.get_logger(__name__)

#: Larger files are not downloaded unless a profile says otherwise (`max_media_bytes`).
DEFAULT_MAX_MEDIA_BYTES = 20 * 1024 * 1024
#: What a channel's own store takes at most (MMS is at most 5 MB, WhatsApp media at most
#: 100 MB); the profile's `max_media_bytes` is checked as well.
DEFAULT_MAX_BYTES = 25 * 1024 * 1024
#: Longest one download may take before it is given up.
DEFAULT_TIMEOUT_S = 60.0
MEDIA_DIR = "media"
_SAFE_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")


@cache
def _unsafe(keep: str) -> re.Pattern[str]:
    return re.compile(f"[^A-Za-z0-9._{re.escape(keep)}-]+")


def safe_name(
    text: str,
    *,
    fallback: str = "_",
    max_chars: int | None = 100,
    trim_ends: str = "",
    keep: str = "",
) -> str:
    """`text` as one path component: each run of other characters than letters, digits,
    `.`, `_`, `-` (and `keep`) becomes `_`, `trim_ends` are taken off both ends and dots off
    the start (no hidden files, no `..`), the last `max_chars` kept (where a suffix is), and
    `fallback` when nothing is left."""
    cleaned = _unsafe(keep).sub("_", text)
    if trim_ends:
        cleaned = cleaned.strip(trim_ends)
    cleaned = cleaned.lstrip(".")
    if max_chars is not None:
        cleaned = cleaned[-max_chars:]
    return cleaned or fallback


def safe_file_name(name: str) -> str:
    """A user's own file name, made safe (`file` when nothing of it is)."""
    return safe_name(name, fallback="file")


def safe_suffix(name: str | None) -> str:
    """The suffix of `name` (".pdf", lowercased) when it is a plain one, else ""."""
    if not name:
        return ""
    suffix = Path(name).suffix
    return suffix.lower() if _SAFE_SUFFIX.fullmatch(suffix) else ""


def suffix_for(content_type: str) -> str:
    """A file suffix for a MIME type (".jpg" for image/jpeg), or "" when none is known."""
    guessed = mimetypes.guess_extension(content_type.partition(";")[0].strip()) or ""
    return ".jpg" if guessed == ".jpe" else guessed


@dataclass(frozen=True, slots=True)
class MediaStore:
    """Where one channel of one profile keeps what its users sent: `root`, under the profile's
    `data_dir`."""

    data_dir: Path
    channel: str
    _: KW_ONLY
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def root(self) -> Path:
        return media_root(self.data_dir, self.channel)

    def intake(self, message: InboundMessage, max_bytes: int) -> MediaIntake:
        """How `message`'s files are taken into this store: those within `max_bytes` (the
        profile's `max_media_bytes`) and the store's own limit, each within its timeout."""
        return MediaIntake(message, min(max_bytes, self.max_bytes), timeout_s=self.timeout_s)

    def path_for(self, chat_id: str, name: str) -> Path:
        return self.root / safe_name(chat_id) / safe_name(name)

    def fits(self, size: int | None) -> bool:
        """Whether a file of `size` bytes (None: not known yet) may be kept."""
        return size is None or size <= self.max_bytes

    def admits(self, size: int | None, **context: object) -> bool:
        """`fits`, with a file that does not logged (with `context`) as too large."""
        return not too_large(size, self.max_bytes, channel=self.channel, **context)

    async def save(self, target: Path, data: bytes) -> Path:
        """Write `data` to `target` (a path under `root`) off the event loop."""
        if not target.is_relative_to(self.root):
            raise ValueError(f"{target} is outside the media directory {self.root}")
        return await save_media(target, data)

    async def fetch(
        self,
        session: aiohttp.ClientSession,
        url: str,
        *,
        chat_id: str,
        name: str,
        headers: dict[str, str] | None = None,
        sha256: str | None = None,
        max_bytes: int | None = None,
    ) -> Path:
        """Download `url` and save it; the name gets a suffix from the content type if it has
        none. With `sha256` (hex), the bytes must have that digest; with `max_bytes`, that limit
        is kept as well as the store's. Raises `ChannelError` on any failure (status, size,
        digest, network, time)."""
        limit = self.max_bytes if max_bytes is None else min(max_bytes, self.max_bytes)
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                session.get(url, headers=headers) as response,
            ):
                if response.status != 200:
                    raise ChannelError(
                        f"the download answered HTTP {response.status}", channel=self.channel
                    )
                data = bytearray()
                async for block in response.content.iter_chunked(64 * 1024):
                    data.extend(block)
                    if len(data) > limit:
                        raise ChannelError(too_large_reason(limit), channel=self.channel)
                content_type = response.content_type
        except (aiohttp.ClientError, OSError) as error:
            raise ChannelError(f"the download failed: {error!r}", channel=self.channel) from error
        except TimeoutError as error:
            raise ChannelError(timed_out_reason(self.timeout_s), channel=self.channel) from error
        if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256.lower():
            raise ChannelError("the SHA-256 digest does not match", channel=self.channel)
        if not Path(name).suffix:
            name += suffix_for(content_type)
        return await self.save(self.path_for(chat_id, name), bytes(data))


def timed_out_reason(timeout_s: float) -> str:
    return f"the download took over {timeout_s:g} s"


class MediaIntake:
    """The files of one received message as the channel fetches them, one `take` each; then
    `message()` is the message with the saved files and the placeholders of the others."""

    def __init__(
        self, message: InboundMessage, max_bytes: int, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self._message = message
        self.max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._paths: list[str] = list(message.media)
        self._placeholders: list[str] = []

    async def take(
        self,
        fetch: Callable[[], Awaitable[Path | str | None]],
        *,
        name: str | None = None,
        mime: str | None = None,
        size: int | None = None,
        kind: MediaKind | None = None,
        duration_s: float | None = None,
    ) -> None:
        """Fetch and save one file with `fetch` unless `size` (what the platform says) is over
        the limit. `fetch` returns the saved path (None: over the limit once read) or raises
        `ChannelError`, whose message is the reason the agent is told."""
        if size is not None and size > self.max_bytes:
            self.skip(too_large_reason(self.max_bytes), name=name, mime=mime, size=size, kind=kind)
            return
        try:
            async with asyncio.timeout(self._timeout_s):
                path = await fetch()
        except ChannelError as error:
            reason = str(error.args[0]) if error.args else str(error)
        except TimeoutError:
            reason = timed_out_reason(self._timeout_s)
        else:
            if path is not None:
                self._paths.append(str(path))
                record_details(
                    self._message.metadata, str(path), name=name, mime=mime, duration_s=duration_s
                )
                return
            reason = too_large_reason(self.max_bytes)
        self.skip(reason, name=name, mime=mime, size=size, kind=kind)

    def skip(
        self,
        reason: str,
        *,
        name: str | None = None,
        mime: str | None = None,
        size: int | None = None,
        kind: MediaKind | None = None,
    ) -> None:
        """Name a file that is not fetched, and why, in the message's text."""
        shown_kind = kind or kind_for(mime or mime_for(name or ""))
        self._placeholders.append(
            not_downloaded(self._message, kind=shown_kind, name=name, size=size, reason=reason)
        )

    def message(self) -> InboundMessage:
        """The message with the saved files in `media` and the placeholders after its text."""
        if not self._placeholders and self._paths == self._message.media:
            return self._message
        content = with_placeholders(self._message.content, self._placeholders)
        return self._message.model_copy(update={"media": self._paths, "content": content})


def media_root(data_dir: Path, channel: str) -> Path:
    """Where one channel of one profile keeps what its users sent."""
    return data_dir / MEDIA_DIR / channel


async def save_media(target: Path, data: bytes) -> Path:
    """Write `data` to `target` off the event loop, never leaving a partial file under its
    name; `target`'s parts must come from `media_root` and `safe_name`."""
    await asyncio.to_thread(_write_file, target, data)
    return target


async def save_within(
    target: Path, data: bytes, max_bytes: int, *, channel: str, **context: object
) -> str | None:
    """`save_media` for a download whose size is known only once it is read: the saved path,
    or None when it is over `max_bytes` (`too_large` logs it with `context`)."""
    if too_large(len(data), max_bytes, channel=channel, **context):
        return None
    return str(await save_media(target, data))


def _write_file(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    partial.write_bytes(data)
    partial.replace(target)


def too_large(size: int | None, max_bytes: int, *, channel: str, **context: object) -> bool:
    """Whether a received file of `size` bytes (None: not known yet) is over `max_bytes`: then
    it is not kept, and that is logged as `<channel>.media_too_large` with `context`."""
    if size is None or size <= max_bytes:
        return False
    log.warning(f"{channel}.media_too_large", size=size, max_bytes=max_bytes, **context)
    return True


async def read_file(
    path_text: str, *, channel: str, max_bytes: int | None = None, limit_note: str = ""
) -> bytes:
    """An outbound media file, read off the event loop; one over `max_bytes` is refused with
    `limit_note` (what the platform takes) as the reason."""
    path = Path(path_text)
    try:
        data = await asyncio.to_thread(path.read_bytes)
    except OSError as error:
        raise ChannelError(
            f"cannot read media file {path}: {error.strerror}",
            channel=channel,
            suggestion="the agent must pass paths this process can read",
        ) from error
    if max_bytes is not None and len(data) > max_bytes:
        raise ChannelError(f"{path.name} is {len(data)} bytes; {limit_note}", channel=channel)
    return data
