"""A platform access token, fetched once, shared by every call, refreshed before it expires.

Feishu's `tenant_access_token` and WeCom's `access_token` both come from a credentials call that
says how long the token lives (`expire` / `expires_in`, in seconds; about two hours). Fetching one
per request would hit the platforms' own rate limits on the token call, so one cached token
serves everyone: it is refreshed a margin before its end (so no request goes out with a token
about to lapse), and at once when the platform says a token is invalid (`invalidate`).
Concurrent callers wait on one refresh rather than each fetching their own.

The one owner of that cache: Feishu, WeCom and the QQ bot (`channels/qq/token.py`) each bring
only their credentials call (`Fetch`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from channels.errors import ChannelError

Clock = Callable[[], float]
T = TypeVar("T")

#: Refresh this long before the platform's expiry, or at a fifth of a short lifetime.
DEFAULT_EARLY_REFRESH_S = 300.0
DEFAULT_SHORT_LIFETIME_SHARE = 0.2


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """What a credentials call returned: the token and how many seconds it is valid."""

    value: str
    expires_in_s: float


Fetch = Callable[[], Awaitable[IssuedToken]]


class TokenRefused(ChannelError):
    """The platform refused the token a call carried (expired early, revoked, rotated)."""


class AccessTokenCache:
    def __init__(
        self,
        fetch: Fetch,
        *,
        early_refresh_s: float = DEFAULT_EARLY_REFRESH_S,
        short_lifetime_share: float = DEFAULT_SHORT_LIFETIME_SHARE,
        clock: Clock = time.monotonic,
    ) -> None:
        """`early_refresh_s` before expiry, at most `short_lifetime_share` of the lifetime."""
        self._fetch = fetch
        self._early_refresh_s = early_refresh_s
        self._short_lifetime_share = short_lifetime_share
        self._clock = clock
        self._value: str | None = None
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> str:
        """A token valid for a while yet; fetches a new one when needed."""
        value = self._current()
        if value is not None:
            return value
        async with self._lock:
            # Another caller may have refreshed it while this one waited for the lock.
            value = self._current()
            if value is not None:
                return value
            issued = await self._fetch()
            margin = min(self._early_refresh_s, issued.expires_in_s * self._short_lifetime_share)
            self._value = issued.value
            self._refresh_at = self._clock() + max(0.0, issued.expires_in_s - margin)
            return issued.value

    async def call_with_token(self, call: Callable[[str], Awaitable[T]]) -> T:
        """`call(token)`; when it raises `TokenRefused`, once more with a fresh token. A fresh
        token refused as well raises `TokenRefused`: then the credentials are at fault."""
        token = await self.get()
        try:
            return await call(token)
        except TokenRefused:
            self.invalidate(token)
        return await call(await self.get())

    def invalidate(self, value: str) -> None:
        """The platform refused `value`: the next `get` fetches anew (unless already done)."""
        if self._value == value:
            self._value = None

    def _current(self) -> str | None:
        if self._value is not None and self._clock() < self._refresh_at:
            return self._value
        return None
