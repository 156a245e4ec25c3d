"""What the `openai` agent shows a model of a message's files.

The new message's images go as `image_url` parts (base64 `data:` URLs), scaled down when over
`max_image_bytes` and named in text when that cannot help or the model has no vision; text files
(UTF-8, up to `max_file_chars`) are put into the text with their names; other files, and audio
already transcribed into the text, are named with type and size. Earlier messages' files are
named only (bounded cost: an image is sent to the model once, with the message it came with).
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from openai.types.chat import ChatCompletionContentPartParam

from channels.media_info import MediaInfo, human_size, kind_for, mime_for
from gateway.agents.images import dimensions, fit_image

if TYPE_CHECKING:
    from config import OpenAIAgentConfig

#: OpenAI's rule for a message's `name`.
_NAME_CHARACTERS = re.compile(r"[^a-zA-Z0-9_-]+")
_TEXT_MIMES = frozenset(
    {"application/json", "application/xml", "application/x-yaml", "application/yaml"}
)


def participant_name(display_name: str) -> str | None:
    """A display name as OpenAI accepts it (`^[a-zA-Z0-9_-]{1,64}$`), or None when nothing of
    it is left."""
    cleaned = _NAME_CHARACTERS.sub("_", display_name).strip("_")
    return cleaned[:64] or None


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
        return None, f"[image: {media.name}, not readable: {error.strerror}]"
    if not config.vision:
        size = dimensions(data)
        shown = f", {size[0]}x{size[1]}" if size else ""
        return None, f"[image: {media.name}{shown}]"
    fitted = fit_image(data, media.mime, config.max_image_bytes)
    if fitted is None:
        return None, (
            f"[image: {media.name}, {human_size(media.size)}, not shown: it cannot be read or "
            f"made smaller than {human_size(config.max_image_bytes)}]"
        )
    url = f"data:{fitted.mime};base64,{base64.b64encode(fitted.data).decode('ascii')}"
    return {"type": "image_url", "image_url": {"url": url}}, ""


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
