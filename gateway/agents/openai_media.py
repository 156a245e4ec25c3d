"""What the `openai` agent shows a model of a message's files.

The new message's images go as `image_url` parts (base64 `data:` URLs), scaled down when over
`max_image_bytes` and named in text when that cannot help or the model has no vision; text files
(UTF-8, up to `max_file_chars`) are put into the text with their names; other files, and audio
already transcribed into the text, are named with type and size. Earlier messages' files are
named only (bounded cost: an image is sent to the model once, with the message it came with).

A reply's Markdown images (`![caption](https://...)`) are taken out of its text and sent as
images (`images_in_reply`): the rest of the text stays text.

Images are made small enough for a model with Pillow: an image over the budget is scaled down
(and re-encoded as JPEG, or PNG when it has transparency) in steps until it fits; one that
cannot be read, or still does not fit at a small size, is named in text instead. Pillow's work
is blocking: it runs off the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from openai.types.chat import ChatCompletionContentPartParam
from PIL import Image, UnidentifiedImageError

from channels.media_info import MediaInfo, human_size, kind_for, mime_for
from gateway.agents.base import ReplyFile

if TYPE_CHECKING:
    from config import OpenAIAgentConfig

log = structlog.get_logger(__name__)

#: OpenAI's rule for a message's `name`.
_NAME_CHARACTERS = re.compile(r"[^a-zA-Z0-9_-]+")
#: `![caption](https://host/path "title")`: a Markdown image with an http(s) source.
_MARKDOWN_IMAGE = re.compile(r'!\[([^\]\n]*)\]\((https?://[^\s)]+)(?:\s+"[^"\n]*")?\)')
_BLANK_RUN = re.compile(r"\n{3,}")
_TEXT_MIMES = frozenset(
    {"application/json", "application/xml", "application/x-yaml", "application/yaml"}
)


def participant_name(display_name: str) -> str | None:
    """A display name as OpenAI accepts it (`^[a-zA-Z0-9_-]{1,64}$`), or None when nothing of
    it is left."""
    cleaned = _NAME_CHARACTERS.sub("_", display_name).strip("_")
    return cleaned[:64] or None


def images_in_reply(text: str) -> tuple[str, list[ReplyFile]]:
    """A reply's text without its Markdown images, and the images as files to send."""
    images = [
        ReplyFile(url=match.group(2), caption=match.group(1).strip())
        for match in _MARKDOWN_IMAGE.finditer(text)
    ]
    if not images:
        return text, []
    rest = _BLANK_RUN.sub("\n\n", _MARKDOWN_IMAGE.sub("", text)).strip()
    return rest, images


def named_in_history(media: Sequence[str]) -> str:
    """Earlier messages' files, by name and kind only: `[image: photo.jpg]`."""
    return "\n".join(f"[{kind_for(mime_for(path))}: {Path(path).name}]" for path in media)


async def message_parts(
    text: str, attachments: Sequence[MediaInfo], config: OpenAIAgentConfig
) -> str | list[ChatCompletionContentPartParam]:
    """The new user message's content: its text alone, or text and image parts."""
    if not attachments:
        return text
    notes: list[str] = []
    images: list[ChatCompletionContentPartParam] = []
    for media in attachments:
        if media.kind == "image":
            part, note = await asyncio.to_thread(_image, media, config)
            if part is not None:
                images.append(part)
            if note:
                notes.append(note)
        elif media.kind == "audio":
            continue  # its words are in the text already (or a placeholder saying why not)
        else:
            notes.append(await asyncio.to_thread(_file, media, config.max_file_chars))
    full_text = "\n".join([text, *notes] if text else notes)
    if not images:
        return full_text
    parts: list[ChatCompletionContentPartParam] = []
    if full_text:
        parts.append({"type": "text", "text": full_text})
    return [*parts, *images]


def _image(
    media: MediaInfo, config: OpenAIAgentConfig
) -> tuple[ChatCompletionContentPartParam | None, str]:
    try:
        data = Path(media.path).read_bytes()
    except OSError as error:
        _not_shown(media, f"not readable: {error.strerror}")
        return None, f"[image: {media.name}, not readable: {error.strerror}]"
    if not config.vision:
        size = dimensions(data)
        shown = f", {size[0]}x{size[1]}" if size else ""
        return None, f"[image: {media.name}{shown}]"
    fitted = fit_image(data, media.mime, config.max_image_bytes)
    if fitted is None:
        _not_shown(media, "unreadable or too large to scale down")
        return None, (
            f"[image: {media.name}, {human_size(media.size)}, not shown: it cannot be read or "
            f"made smaller than {human_size(config.max_image_bytes)}]"
        )
    url = f"data:{fitted.mime};base64,{base64.b64encode(fitted.data).decode('ascii')}"
    return {"type": "image_url", "image_url": {"url": url}}, ""


def _not_shown(media: MediaInfo, reason: str) -> None:
    # The turn's channel and message id come with the log's context (the runner binds them).
    log.warning("media.image_not_shown", file=media.name, size=media.size, reason=reason)


def _file(media: MediaInfo, max_chars: int) -> str:
    described = f"[{media.kind}: {media.name}, {media.mime}, {human_size(media.size)}]"
    if media.kind != "file" or not _may_be_text(media.mime) or media.size > max_chars * 4:
        return described
    try:
        text = Path(media.path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return described
    if len(text) > max_chars or "\x00" in text:
        return described
    return f"[file: {media.name}]\n{text}\n[end of {media.name}]"


def _may_be_text(mime: str) -> bool:
    return mime.startswith("text/") or mime in _TEXT_MIMES or mime == "application/octet-stream"


#: Below this longest side a scaled image no longer shows enough to be worth sending.
MIN_SIDE = 256
_STEP = 0.7
_JPEG_QUALITY = 85


@dataclass(frozen=True, slots=True)
class FittedImage:
    data: bytes
    mime: str
    width: int
    height: int


def dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height), read from the header only; None when it is not an image Pillow reads."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError):
        return None


def fit_image(data: bytes, mime: str, max_bytes: int) -> FittedImage | None:
    """`data` itself when within `max_bytes`, else a scaled-down copy that is; None when the
    image cannot be read or does not fit even at `MIN_SIDE` pixels."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if len(data) <= max_bytes:
                return FittedImage(data, mime, width, height)
            image.load()
            return _scaled_down(image, max_bytes)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError):
        return None


def _scaled_down(image: Image.Image, max_bytes: int) -> FittedImage | None:
    transparent = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
    mode, image_format, mime = (
        ("RGBA", "PNG", "image/png")
        if transparent
        else (
            "RGB",
            "JPEG",
            "image/jpeg",
        )
    )
    source = image.convert(mode)
    scale = 1.0
    while True:
        width = max(1, round(source.width * scale))
        height = max(1, round(source.height * scale))
        if max(width, height) < MIN_SIDE:
            return None
        resized = (
            source if scale == 1.0 else source.resize((width, height), Image.Resampling.LANCZOS)
        )
        buffer = io.BytesIO()
        if image_format == "JPEG":
            resized.save(buffer, "JPEG", quality=_JPEG_QUALITY, optimize=True)
        else:
            resized.save(buffer, "PNG", optimize=True)
        if buffer.tell() <= max_bytes:
            return FittedImage(buffer.getvalue(), mime, width, height)
        scale *= _STEP
