"""The QQ bot's access token: fetched from `token_url`, cached, refreshed before it expires.

`POST token_url {"appId", "clientSecret"}` answers `{"access_token", "expires_in"}`, where
`expires_in` is a string of seconds ("7200"). The token is refreshed `refresh_margin_s` before
it expires (QQ hands out a new one within the last minute), or at once after the API refused it
(`call_with_token` does that for a refused call). Concurrent callers share one fetch: the
caching is `channels.access_token`'s, this module is only QQ's credentials call.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiohttp
import structlog

from channels.access_token import AccessTokenCache, IssuedToken, issued_token
from channels.errors import AuthError, ChannelError, TransientError

log = structlog.get_logger(__name__)

T = TypeVar("T")

CHANNEL = "qq-bot"
CREDENTIALS_HINT = "check app_id and app_secret in the QQ bot open platform"


class AccessToken:
    def __init__(
        self,
        http: Callable[[], aiohttp.ClientSession],
        *,
        token_url: str,
        app_id: str,
        app_secret: str,
        timeout_s: float = 10.0,
        refresh_margin_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = http
        self._token_url = token_url
        self._app_id = app_id
        self._app_secret = app_secret
        self._timeout_s = timeout_s
        self._cache = AccessTokenCache(
            self._fetch,
            channel=CHANNEL,
            credentials_hint=CREDENTIALS_HINT,
            early_refresh_s=refresh_margin_s,
            short_lifetime_share=0.5,
            clock=clock,
        )

    async def get(self) -> str:
        return await self._cache.get()

    def invalidate(self, token: str) -> None:
        """The API refused `token`: the next `get` fetches a new one."""
        self._cache.invalidate(token)

    async def call_with_token(self, call: Callable[[str], Awaitable[T]], *, what: str) -> T:
        """`call(token)`, repeated once with a fresh token when it raises `TokenRefused`."""
        return await self._cache.call_with_token(call, what=what)

    async def _fetch(self) -> IssuedToken:
        payload = {"appId": self._app_id, "clientSecret": self._app_secret}
        timeout = aiohttp.ClientTimeout(total=self._timeout_s)
        try:
            async with self._http().post(self._token_url, json=payload, timeout=timeout) as reply:
                status = reply.status
                data = await reply.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransientError(
                f"fetching the access token failed: {exc}", channel=CHANNEL
            ) from exc
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
