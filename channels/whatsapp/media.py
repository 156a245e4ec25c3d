"""Media both ways on WhatsApp: what users send is downloaded, what the agent sends uploaded.

In: `GET /{media-id}` gives a short-lived URL, its MIME type, size and SHA-256; the URL is
fetched with the bearer token and the bytes must match the digest. Out: the file is uploaded
(`POST /{phone-number-id}/media`) and sent as a message of the kind its MIME type allows
(WhatsApp takes JPEG and PNG images, MP4 and 3GPP videos, audio; anything else as a document).
"""

from __future__ import annotations

import mimetypes
from functools import partial
from pathlib import Path

from bus import InboundMessage
from channels.errors import ChannelError
from channels.media_files import MediaIntake, MediaStore, read_file
from channels.whatsapp.graph import CHANNEL, GraphClient
from channels.whatsapp.inbound import MediaRef

_IMAGE_TYPES = frozenset({"image/jpeg", "image/png"})
_VIDEO_TYPES = frozenset({"video/mp4", "video/3gpp"})


def media_kind(mime_type: str) -> str:
    if mime_type in _IMAGE_TYPES:
        return "image"
    if mime_type in _VIDEO_TYPES:
        return "video"
    if mime_type.startswith("audio/"):
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
    """Upload a local file and send it; the wamid of the message."""
    data = await read_file(path_text, channel=CHANNEL)
    name = Path(path_text).name
    mime_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    media_id = await graph.upload(data, name, mime_type)
    kind = media_kind(mime_type)
    content: dict[str, object] = {"id": media_id}
    if kind == "document":
        content["filename"] = name
    return await graph.send(chat_id, kind, content)
