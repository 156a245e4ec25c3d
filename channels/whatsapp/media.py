"""Media both ways on WhatsApp: what users send is downloaded, what the agent sends uploaded.

In: `GET /{media-id}` gives a short-lived URL, its MIME type, size and SHA-256; the URL is
fetched with the bearer token and the bytes must match the digest. Out: the file is uploaded
(`POST /{phone-number-id}/media`) and sent as a message of the kind its MIME type and size
allow, referring to the upload by id; anything else goes as a document.
"""

from __future__ import annotations

import mimetypes
from functools import partial
from pathlib import Path

from bus import Attachment, InboundMessage
from channels.errors import ChannelError
from channels.media_files import MediaIntake, MediaStore, read_file
from channels.whatsapp.graph import CHANNEL, GraphClient
from channels.whatsapp.inbound import MediaRef

# Meta, "Supported media types" (Cloud API reference): images JPEG and PNG up to 5 MB; video
# MP4 and 3GPP up to 16 MB; audio AAC, AMR, MP3, M4A and OGG (Opus) up to 16 MB; documents up
# to 100 MB. A file too large or of a type its kind does not take still goes, as a document.
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png"})
_VIDEO_TYPES = frozenset({"video/mp4", "video/3gpp", "video/3gp"})
MB = 1024 * 1024
MAX_IMAGE_BYTES = 5 * MB
MAX_VIDEO_AUDIO_BYTES = 16 * MB
MAX_DOCUMENT_BYTES = 100 * MB
#: The message kinds that show a caption under the file.
_CAPTIONED = frozenset({"image", "video", "document"})
#: WhatsApp's caption limit, in characters.
CAPTION_LIMIT = 1024


def media_kind(mime_type: str, size: int = 0) -> str:
    """The message type a file of `mime_type` and `size` bytes goes as."""
    if mime_type in _IMAGE_TYPES and size <= MAX_IMAGE_BYTES:
        return "image"
    if mime_type in _VIDEO_TYPES and size <= MAX_VIDEO_AUDIO_BYTES:
        return "video"
    if mime_type.startswith("audio/") and size <= MAX_VIDEO_AUDIO_BYTES:
        return "audio"
    return "document"


async def receive(
    graph: GraphClient, store: MediaStore, message: InboundMessage, ref: MediaRef, max_bytes: int
) -> InboundMessage:
    """`message` with its file saved, or named in its text when it is over `max_bytes` (the
    lookup states its size), refused, or does not match the digest WhatsApp gave."""
    intake = MediaIntake(message, max_bytes, timeout_s=store.timeout_s)
    name, mime = ref.file_name, ref.mime_type or None
    try:
        located = await graph.media_url(ref.media_id)
    except ChannelError as error:
        intake.skip(f"the media lookup failed: {error.args[0]}", name=name, mime=mime)
        return intake.message()
    url, digest, size = located.get("url"), located.get("sha256"), located.get("file_size")
    if not isinstance(url, str):
        intake.skip("the media lookup gave no url", name=name, mime=mime)
        return intake.message()
    fetch = partial(
        store.fetch,
        graph.session,
        url,
        chat_id=message.chat_id,
        name=ref.media_id + (f"-{ref.file_name}" if ref.file_name else ""),
        sha256=digest if isinstance(digest, str) else None,
        max_bytes=max_bytes,
    )
    await intake.take(fetch, name=name, mime=mime, size=size if isinstance(size, int) else None)
    return intake.message()


async def send_file(graph: GraphClient, chat_id: str, path_text: str) -> str | None:
    """Upload a local file (a tool's `media` path) and send it; the wamid of the message."""
    data = await read_file(path_text, channel=CHANNEL, max_bytes=MAX_DOCUMENT_BYTES)
    name = Path(path_text).name
    mime_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return await _upload_and_send(graph, chat_id, data, name, mime_type, "")


async def send_attachment(graph: GraphClient, chat_id: str, attachment: Attachment) -> str | None:
    """Upload one file of a reply and send it by its media id; the wamid of the message."""
    data = await read_file(
        attachment.path,
        channel=CHANNEL,
        max_bytes=MAX_DOCUMENT_BYTES,
        limit_note="WhatsApp takes files up to 100 MB",
    )
    return await _upload_and_send(
        graph, chat_id, data, attachment.name, attachment.mime, attachment.caption
    )


async def _upload_and_send(
    graph: GraphClient, chat_id: str, data: bytes, name: str, mime_type: str, caption: str
) -> str | None:
    kind = media_kind(mime_type, len(data))
    media_id = await graph.upload(data, name, mime_type)
    content: dict[str, object] = {"id": media_id}
    if kind == "document":
        content["filename"] = name
    if caption and kind in _CAPTIONED:
        content["caption"] = caption[:CAPTION_LIMIT]
    return await graph.send(chat_id, kind, content)
