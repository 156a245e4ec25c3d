"""Feishu/Lark's open API over aiohttp, with failures in the manager's words.

Every answer is JSON `{"code", "msg", ...}`, code 0 on success. The tenant access token is
cached for its `expire` and refetched early, or at once on an invalid-token code (then the call
is repeated once). A rate limit is HTTP 429 (400 on old APIs) with code 99991400 and the
seconds to wait in `x-ogw-ratelimit-reset`. A file a user sent is downloaded with the
message resource API (`fetch_resource`): bytes on success, the same JSON on a refusal. A file
the bot sends is uploaded first (`upload`: im/v1/images or im/v1/files, multipart), and the
message names the key the upload answered with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from json import dumps
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from channels.errors import (
    AuthError,
    ChannelError,
    FormattingRejected,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.media_files import MediaStore
from channels.retry import retry_after_s
from channels.web.client import IssuedToken, TokenApi, TokenRefused, issued_token

CHANNEL = "feishu"
TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
ENDPOINT_PATH = "/callback/ws/endpoint"


class FeishuApi(TokenApi):
    channel = CHANNEL
    credentials_hint = "check app_id and app_secret"

    async def _fetch_token(self) -> IssuedToken:
        credentials = {"app_id": self.client_id, "app_secret": self._secret}
        body = await self.call(
            "POST", TOKEN_PATH, "tenant_access_token", json=credentials, authorised=False
        )
        return issued_token(body, "tenant_access_token", "expire", channel=CHANNEL)

    async def ws_endpoint(self) -> dict[str, Any]:
        """The long connection's URL and client settings (`data{URL, ClientConfig}`)."""
        credentials = {"AppID": self.client_id, "AppSecret": self._secret}
        body = await self.call(
            "POST", ENDPOINT_PATH, "ws endpoint", json=credentials, authorised=False
        )
        data = body.get("data")
        if not isinstance(data, dict) or not isinstance(data.get("URL"), str):
            raise TransientError("the ws endpoint answer has no URL", channel=CHANNEL)
        return data

    async def fetch_resource(
        self,
        store: MediaStore,
        *,
        message_id: str,
        key: str,
        resource_type: str,
        chat_id: str,
        name: str,
        max_bytes: int,
    ) -> Path:
        """Download one file of a received message into `store`, at most `max_bytes` of it
        (raises `ChannelError`)."""
        token = await self.tokens.get()
        path = f"/open-apis/im/v1/messages/{quote(message_id, safe='')}/resources/"
        url = f"{self.base_url}{path}{quote(key, safe='')}?type={quote(resource_type)}"
        headers = {"Authorization": f"Bearer {token}"}
        return await store.fetch(
            self.http(), url, chat_id=chat_id, name=name, headers=headers, max_bytes=max_bytes
        )

    async def call(
        self,
        method: str,
        path: str,
        what: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Mapping[str, Any] | None = None,
        authorised: bool = True,
    ) -> dict[str, Any]:
        """A call with the tenant token, a refused one refetched and the call repeated once;
        `authorised=False` for the credentials calls, which carry none."""
        send = partial(self._send, method, path, what, params, json)
        if not authorised:
            return await send(None)
        return await self.tokens.call_with_token(send, what=what)

    async def upload(
        self,
        path: str,
        what: str,
        fields: Mapping[str, str],
        *,
        file_field: str,
        file_name: str,
        data: bytes,
    ) -> dict[str, Any]:
        """A multipart upload of `data` as `file_field` beside `fields`, with the tenant token
        (a form is read once, so each try builds its own)."""

        def form() -> aiohttp.FormData:
            built = aiohttp.FormData()
            for name, value in fields.items():
                built.add_field(name, value)
            built.add_field(file_field, data, filename=file_name)
            return built

        send = partial(self._send, "POST", path, what, None, None, form=form)
        return await self.tokens.call_with_token(send, what=what)

    async def _send(
        self,
        method: str,
        path: str,
        what: str,
        params: Mapping[str, str] | None,
        json: Mapping[str, Any] | None,
        token: str | None,
        *,
        form: Callable[[], aiohttp.FormData] | None = None,
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data: bytes | aiohttp.FormData | None = form() if form is not None else None
        if json is not None:
            # UTF-8 as is: Feishu's 30 KB body limit would count each CJK character as a
            # 6-byte \u escape otherwise (aiohttp's json= escapes everything non-ASCII).
            data = dumps(json, ensure_ascii=False, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json; charset=utf-8"
        async with (
            self.deadline(what),
            self.http().request(
                method, self.base_url + path, params=params, data=data, headers=headers
            ) as response,
        ):
            status, reset = response.status, response.headers.get("x-ogw-ratelimit-reset")
            try:
                body = await response.json(content_type=None)
            except ValueError:
                body = None
        if not isinstance(body, dict):
            if status == 429:
                raise RateLimited(retry_after_s(reset), f"{what}: HTTP 429", channel=CHANNEL)
            raise TransientError(f"{what}: HTTP {status}, not Feishu's JSON", channel=CHANNEL)
        check(body, status, reset, what)
        return body


# What the answers' codes mean, as `check` raises them.
INVALID_TOKEN = frozenset({99991661, 99991663, 99991664, 99991668})
RATE_LIMITED = frozenset({99991400, 11232, 230020})
#: Wrong app id or secret, app not enabled, bot capability off, long connection not allowed.
CREDENTIALS = {
    10003: "check app_id",
    10014: "check app_secret",
    99991401: "add this server's IP to the app's allow list",
    99991672: "grant the app the scopes it needs (im:message, im:message:send_as_bot)",
    230006: "enable the app's bot capability",
    403: "enable long-connection event subscription for the app, or use mode: webhook",
    514: "check app_id and app_secret",
}
TOO_LONG = frozenset({230025})
CARD_REJECTED = frozenset({230099, 11310})


def check(body: Mapping[str, Any], status: int, reset: str | None, what: str) -> None:
    """Raise the typed error a Feishu answer stands for; return for success."""
    code = body.get("code", 0)
    if code == 0 and status < 400:
        return
    detail = f"{what}: HTTP {status}, code {code} ({body.get('msg', '')})"
    if status == 429 or code in RATE_LIMITED:
        raise RateLimited(retry_after_s(reset), detail, channel=CHANNEL)
    if code in INVALID_TOKEN:
        raise TokenRefused(detail, channel=CHANNEL)
    if isinstance(code, int) and code in CREDENTIALS:
        raise AuthError(detail, channel=CHANNEL, suggestion=CREDENTIALS[code])
    if code in TOO_LONG:
        raise MessageTooLong(detail, channel=CHANNEL)
    if code in CARD_REJECTED:
        raise FormattingRejected(detail, channel=CHANNEL)
    if status >= 500:
        raise TransientError(detail, channel=CHANNEL, suggestion="Feishu is having trouble")
    raise ChannelError(detail, channel=CHANNEL)
