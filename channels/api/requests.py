"""Reading and checking the JSON bodies of the HTTP API.

Whatever the server could not serve is refused here, at once, as 400 with a reason: bodies that
are not JSON, too deeply nested, not an object, with wrong or unknown fields, or with text that
is not valid Unicode (a lone surrogate such as "\\ud800", which JSON allows but no file, log or
platform can hold).
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bus import BUTTON_DATA_MAX_BYTES
from channels.web.webhook import UnreadableJson, json_payload

MAX_CHAT_ID_CHARS = 256
MAX_CLIENT_MESSAGE_ID_CHARS = 256
MAX_ATTACHMENTS = 10
JSON_TYPES = ("application/json",)


class BadRequest(Exception):
    """Answered with `status` (400 unless told) and `{"error": message}`."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def error_response(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the gateway did not take a request's message: the status, the reason, and when a
    full backlog (429, 503) may take it."""

    status: int
    message: str
    retry_after_s: float | None = None

    def retry_after(self) -> int | None:
        """Whole seconds for `Retry-After`; None when retrying does not help."""
        if self.retry_after_s is None:
            return None
        return max(1, math.ceil(self.retry_after_s))

    def as_error(self) -> web.Response:
        """The refusal in `/v1/chat`'s shape."""
        retry_after = self.retry_after()
        if retry_after is None:
            return error_response(self.status, self.message)
        return web.json_response(
            {"error": self.message, "retry_after_s": retry_after},
            status=self.status,
            headers={"Retry-After": str(retry_after)},
        )


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """A file sent with a message: `{"data": "<base64>", "name": "photo.jpg", "mime": ...}`."""

    name: str
    mime: str | None
    data: bytes


@dataclass(frozen=True, slots=True)
class ChatRequest:
    chat_id: str
    content: str
    client_message_id: str | None
    stream: bool
    attachments: tuple[UploadedFile, ...] = ()
    #: A tap on a button of an earlier reply: `{"data", "message_id"}` (`bus.CALLBACK`).
    callback: dict[str, str] | None = None


async def read_json_body(request: web.Request, max_bytes: int) -> Any:
    """The whole body (up to `max_bytes`), parsed as JSON."""
    if request.content_type not in JSON_TYPES:
        raise BadRequest(
            f"Content-Type is {request.content_type!r}; send the body as application/json", 415
        )
    if request.content_length is not None and request.content_length > max_bytes:
        raise BadRequest(f"body is {request.content_length} bytes; the limit is {max_bytes}", 413)
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise BadRequest(f"body is over the limit of {max_bytes} bytes", 413) from None
    if len(body) > max_bytes:
        raise BadRequest(f"body is over the limit of {max_bytes} bytes", 413)
    if not body:
        raise BadRequest('empty body; send JSON like {"chat_id": "...", "content": "..."}')
    try:
        return json_payload(body)
    except UnreadableJson as error:
        raise BadRequest(f"body is not valid JSON: {error}") from None


def valid_text(name: str, value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        bad = value[error.start : error.end].encode("unicode_escape").decode()
        raise BadRequest(
            f"field {name!r} holds {bad}, half of a UTF-16 surrogate pair; send valid Unicode text"
        ) from None
    return value


def _field(body: dict[str, Any], name: str, kind: type, *, required: bool) -> Any:
    if name not in body or body[name] is None:
        if required:
            raise BadRequest(f"missing field {name!r}")
        return None
    value = body[name]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise BadRequest(f"field {name!r} must be a {kind.__name__}, got {type(value).__name__}")
    return valid_text(name, value) if isinstance(value, str) else value


def parse_chat_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise BadRequest(f"body must be a JSON object, got {type(body).__name__}")
    known = {"chat_id", "content", "client_message_id", "stream", "attachments", "callback"}
    unknown = sorted(set(body) - known)
    if unknown:
        shown = ", ".join(repr(name.encode("unicode_escape").decode())[1:-1] for name in unknown)
        raise BadRequest(f"unknown field(s) {shown[:300]}; known: {', '.join(sorted(known))}")
    chat_id = _field(body, "chat_id", str, required=True)
    callback = _callback(body)
    content = _field(body, "content", str, required=callback is None)
    if content is None and callback is not None:
        content = callback["data"]
    client_message_id = _field(body, "client_message_id", str, required=False)
    if not chat_id.strip() or len(chat_id) > MAX_CHAT_ID_CHARS:
        raise BadRequest(f"chat_id must be 1 to {MAX_CHAT_ID_CHARS} characters")
    if client_message_id is not None and not (
        0 < len(client_message_id) <= MAX_CLIENT_MESSAGE_ID_CHARS
    ):
        raise BadRequest(f"client_message_id must be 1 to {MAX_CLIENT_MESSAGE_ID_CHARS} characters")
    attachments = _attachments(_field(body, "attachments", list, required=False) or [])
    if not content.strip() and not attachments:
        raise BadRequest("content is empty")
    return ChatRequest(
        chat_id=chat_id,
        content=content,
        client_message_id=client_message_id,
        stream=bool(_field(body, "stream", bool, required=False)),
        attachments=attachments,
        callback=callback,
    )


def _attachments(items: list[Any]) -> tuple[UploadedFile, ...]:
    """The message's files; the body's size limit (`max_body_bytes`) bounds them."""
    if len(items) > MAX_ATTACHMENTS:
        raise BadRequest(f"at most {MAX_ATTACHMENTS} attachments a message")
    files: list[UploadedFile] = []
    for number, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise BadRequest(f"attachment {number} must be an object with data and name")
        data = _field(item, "data", str, required=True)
        try:
            decoded = base64.b64decode(data, validate=True)
        except binascii.Error:
            raise BadRequest(f"attachment {number}: data is not base64") from None
        name = _field(item, "name", str, required=False) or f"file-{number}"
        mime = _field(item, "mime", str, required=False)
        files.append(UploadedFile(name, mime, decoded))
    return tuple(files)


def _callback(body: dict[str, Any]) -> dict[str, str] | None:
    """The request's `callback` (a button tap): the button's `data` and the `message_id` of
    the reply that held it, both as the reply gave them."""
    callback = _field(body, "callback", dict, required=False)
    if callback is None:
        return None
    if set(callback) != {"data", "message_id"}:
        raise BadRequest('callback must be {"data": "...", "message_id": "..."}')
    data, message_id = (
        _field(callback, "data", str, required=True),
        _field(callback, "message_id", str, required=True),
    )
    if not data or len(data.encode()) > BUTTON_DATA_MAX_BYTES:
        raise BadRequest(f"callback data must be 1 to {BUTTON_DATA_MAX_BYTES} bytes")
    if not 0 < len(message_id) <= MAX_CLIENT_MESSAGE_ID_CHARS:
        raise BadRequest(
            f"callback message_id must be 1 to {MAX_CLIENT_MESSAGE_ID_CHARS} characters"
        )
    return {"data": data, "message_id": message_id}
