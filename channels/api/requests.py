"""Reading and checking the JSON bodies of the HTTP API."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

MAX_CHAT_ID_CHARS = 256


class BadRequest(Exception):
    """Answered with 400 and `{"error": message}`."""


def error_response(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    chat_id: str
    content: str
    client_message_id: str | None
    stream: bool


async def read_json_body(request: web.Request, max_bytes: int) -> Any:
    if request.content_length is not None and request.content_length > max_bytes:
        raise BadRequest(f"body is {request.content_length} bytes; the limit is {max_bytes}")
    body = await request.content.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise BadRequest(f"body is over the limit of {max_bytes} bytes")
    if not body:
        raise BadRequest('empty body; send JSON like {"chat_id": "...", "content": "..."}')
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BadRequest(f"body is not valid JSON: {error}") from None


def _field(body: dict[str, Any], name: str, kind: type, *, required: bool) -> Any:
    if name not in body or body[name] is None:
        if required:
            raise BadRequest(f"missing field {name!r}")
        return None
    value = body[name]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise BadRequest(f"field {name!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def parse_chat_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise BadRequest(f"body must be a JSON object, got {type(body).__name__}")
    known = {"chat_id", "content", "client_message_id", "stream"}
    unknown = sorted(set(body) - known)
    if unknown:
        raise BadRequest(
            f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    chat_id = _field(body, "chat_id", str, required=True)
    content = _field(body, "content", str, required=True)
    if not chat_id.strip() or len(chat_id) > MAX_CHAT_ID_CHARS:
        raise BadRequest(f"chat_id must be 1 to {MAX_CHAT_ID_CHARS} characters")
    if not content.strip():
        raise BadRequest("content is empty")
    return ChatRequest(
        chat_id=chat_id,
        content=content,
        client_message_id=_field(body, "client_message_id", str, required=False),
        stream=bool(_field(body, "stream", bool, required=False)),
    )
