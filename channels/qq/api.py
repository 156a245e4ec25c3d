"""The QQ bot OpenAPI (v2): the access token, the calls the channel makes, and what their errors
mean.

The access token: `POST token_url {"appId", "clientSecret"}` answers `{"access_token",
"expires_in"}`, where `expires_in` is a string of seconds ("7200"). The token is refreshed
`refresh_margin_s` before it expires (QQ hands out a new one within the last minute), or at once
after the API refused it (`call_with_token` does that for a refused call). Concurrent callers
share one fetch: the caching is `channels.web.client`'s (`AccessTokenCache`), this module brings
only QQ's credentials call.

Every call carries `Authorization: QQBot <access token>`; a refused token is fetched anew once.
Errors come as `{"code" | "err_code", "message"}`: 429 and code 22009 ("msg limit exceed") are
rate limits, a repeated `msg_id` + `msg_seq` (40054005) means QQ already has that reply, the
passive-reply window codes mean the message can no longer be answered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import aiohttp
import structlog

from channels.errors import AuthError, ChannelError, RateLimited, TransientError
from channels.retry import retry_after_s
from channels.web.client import AccessTokenCache, IssuedToken, TokenRefused, issued_token

log = structlog.get_logger(__name__)

CHANNEL = "qq-bot"
CREDENTIALS_HINT = "check app_id and app_secret in the QQ bot open platform"


def access_token(
    http: Callable[[], aiohttp.ClientSession],
    *,
    token_url: str,
    app_id: str,
    app_secret: str,
    timeout_s: float = 10.0,
    refresh_margin_s: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
) -> AccessTokenCache:
    """The shared token cache over QQ's credentials call."""
    credentials = {"appId": app_id, "clientSecret": app_secret}
    return AccessTokenCache(
        partial(_fetch, http, token_url, credentials, aiohttp.ClientTimeout(total=timeout_s)),
        channel=CHANNEL,
        credentials_hint=CREDENTIALS_HINT,
        early_refresh_s=refresh_margin_s,
        short_lifetime_share=0.5,
        clock=clock,
    )


async def _fetch(
    http: Callable[[], aiohttp.ClientSession],
    token_url: str,
    credentials: dict[str, str],
    client_timeout: aiohttp.ClientTimeout,
) -> IssuedToken:
    try:
        async with http().post(token_url, json=credentials, timeout=client_timeout) as reply:
            status = reply.status
            data = await reply.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TransientError(f"fetching the access token failed: {exc}", channel=CHANNEL) from exc
    except ValueError as exc:
        raise TransientError(f"the token answer is not JSON ({exc})", channel=CHANNEL) from exc
    if status >= 500:
        raise TransientError(f"the token endpoint answered {status}", channel=CHANNEL)
    token = data.get("access_token") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token:
        message = data.get("message") if isinstance(data, dict) else None
        error = AuthError if status in (200, 400, 401, 403) else ChannelError
        raise error(
            f"no access token: {message or data!r}",
            channel=CHANNEL,
            suggestion=CREDENTIALS_HINT,
        )
    issued = issued_token(data, "access_token", "expires_in", channel=CHANNEL)
    log.debug("qq.access_token_fetched", expires_in_s=issued.expires_in_s)
    return issued


RATE_LIMIT_CODES = frozenset({22009})
DUPLICATE_CODES = frozenset({40054005})
WINDOW_CLOSED_CODES = frozenset({304103, 40034005, 40034128})
TOKEN_CODES = frozenset({11241, 11242, 11243, 11244})


class ReplyWindowClosed(ChannelError):
    """QQ no longer takes replies to that message (or its five are used up)."""


class AlreadyDelivered(Exception):
    """QQ has this very reply (`msg_id` + `msg_seq`) already: a resend, nothing to do."""


def _code(data: object) -> int | None:
    if not isinstance(data, dict):
        return None
    for key in ("code", "err_code"):
        value = data.get(key)
        if isinstance(value, int) and value != 0:
            return value
    return None


class QQApi:
    def __init__(
        self,
        http: Callable[[], aiohttp.ClientSession],
        token: AccessTokenCache,
        *,
        base_url: str,
        timeout_s: float = 10.0,
    ) -> None:
        self._http = http
        self._token = token
        self._base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def me(self) -> dict[str, Any]:
        return await self.call("GET", "/users/@me")

    async def post_message(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.call("POST", path, body)

    async def acknowledge_interaction(self, interaction_id: str) -> None:
        """Tell QQ a tap was handled (`PUT /interactions/{id}`, code 0: success)."""
        await self.call("PUT", f"/interactions/{interaction_id}", {"code": 0})

    async def call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        async def attempt(token: str) -> dict[str, Any]:
            status, headers, data = await self._request(method, path, body, token)
            code = _code(data)
            if status == 401 or code in TOKEN_CODES:
                raise TokenRefused(f"the access token was refused ({data!r})", channel=CHANNEL)
            if 200 <= status < 300 and code is None:
                return data if isinstance(data, dict) else {}
            raise self._error(method, path, status, headers, data, code)

        return await self._token.call_with_token(attempt, what=f"{method} {path}")

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None, token: str
    ) -> tuple[int, Any, object]:
        headers = {"Authorization": f"QQBot {token}"}
        try:
            async with self._http().request(
                method, self._base_url + path, json=body, headers=headers, timeout=self._timeout
            ) as reply:
                text = await reply.text()
                try:
                    data: object = await reply.json(content_type=None) if text else {}
                except ValueError:
                    data = {"message": text[:200]}
                return reply.status, reply.headers, data
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransientError(f"{method} {path} failed: {exc}", channel=CHANNEL) from exc

    @staticmethod
    def _error(
        method: str, path: str, status: int, headers: Any, data: object, code: int | None
    ) -> Exception:
        message = data.get("message") if isinstance(data, dict) else None
        text = f"{method} {path}: {status} code {code} ({message})"
        if status == 429 or code in RATE_LIMIT_CODES:
            return RateLimited(retry_after_s(headers.get("Retry-After")), text, channel=CHANNEL)
        if code in DUPLICATE_CODES:
            return AlreadyDelivered(text)
        if code in WINDOW_CLOSED_CODES:
            return ReplyWindowClosed(text, channel=CHANNEL)
        if status >= 500:
            return TransientError(text, channel=CHANNEL)
        if status == 403:
            return AuthError(text, channel=CHANNEL, suggestion="check the bot's permissions")
        return ChannelError(text, channel=CHANNEL)
