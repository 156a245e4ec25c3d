"""The QQ bot's access token: fetched from `token_url`, cached, refreshed before it expires.

`POST token_url {"appId", "clientSecret"}` answers `{"access_token", "expires_in"}`, where
`expires_in` is a string of seconds ("7200"). The token is refreshed `refresh_margin_s` before
it expires (QQ hands out a new one within the last minute), or at once after the API refused it
(`call_with_token` does that for a refused call). Concurrent callers share one fetch: the
caching is `channels.web.client`'s (`AccessTokenCache`), this module is only QQ's
credentials call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import aiohttp
import structlog

from channels.errors import AuthError, ChannelError, TransientError
from channels.web.client import AccessTokenCache, IssuedToken, issued_token

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
