"""Bot API parameters as they arrive: query string, JSON, urlencoded form or multipart.

python-telegram-bot sends form or multipart fields whose values are JSON-encoded unless they are
strings ("42", "true", "[...]"); they are decoded back, except the fields that are text.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import BodyPartReader, web

from tests.fakes.telegram_server.state import ApiError, UploadedFile

# Parameter values that are text even when they look like JSON ("123", "true").
_TEXT_PARAMS = frozenset(
    {"text", "caption", "parse_mode", "secret_token", "url", "action", "emoji", "file_id"}
)


def _decoded(key: str, value: str) -> Any:
    if key in _TEXT_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


async def read_params(request: web.Request) -> tuple[dict[str, Any], dict[str, UploadedFile]]:
    """Query, JSON, urlencoded or multipart parameters, as the Bot API accepts them."""
    params: dict[str, Any] = {key: _decoded(key, value) for key, value in request.query.items()}
    files: dict[str, UploadedFile] = {}
    if not request.can_read_body:
        return params, files
    if request.content_type == "application/json":
        try:
            body = await request.json()
        except ValueError as exc:
            raise ApiError(400, f"Bad Request: can't parse JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise ApiError(400, "Bad Request: the JSON body must be an object")
        params.update(body)
    elif request.content_type == "multipart/form-data":
        async for part in await request.multipart():
            if not isinstance(part, BodyPartReader) or part.name is None:
                continue
            if part.filename is not None:
                content_type = part.headers.get("Content-Type", "application/octet-stream")
                files[part.name] = UploadedFile(part.filename, content_type, await part.read())
            else:
                params[part.name] = _decoded(part.name, await part.text())
    else:
        form = await request.post()
        params.update({key: _decoded(key, str(value)) for key, value in form.items()})
    return params, files
