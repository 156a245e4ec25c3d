"""A platform access token, fetched once, shared by every call, refreshed before it expires.

Feishu's `tenant_access_token` and WeCom's `access_token` both come from a credentials call that
says how long the token lives (`expire` / `expires_in`, in seconds; about two hours). Fetching one
per request would hit the platforms' own rate limits on the token call, so one cached token
serves everyone: it is refreshed a margin before its end (so no request goes out with a token
about to lapse), and at once when the platform says a token is invalid (`invalidate`).
Concurrent callers wait on one refresh rather than each fetching their own. A call whose token
is refused (`TokenRefused`) is repeated once with a fresh one; refused again, the credentials are
at fault (`AuthError`).

The one owner of that cache: Feishu, WeCom (both through `channels/web/client.py`) and the QQ bot
(`channels/qq/api.py`) each bring only their credentials call (`Fetch`, its answer read by
`issued_token`) and say which answers mean a refused token.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, TypeVar

import aiohttp

from channels.errors import AuthError, ChannelError
from channels.retry import platform_call

Clock = Callable[[], float]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """What a credentials call returned: the token and how many seconds it is valid."""

    value: str
    expires_in_s: float


#: A lifetime the answer does not state is taken as the two hours every platform here issues.
DEFAULT_LIFETIME_S = 7200.0


def issued_token(
    answer: Mapping[str, Any], token_key: str, lifetime_key: str, *, channel: str
) -> IssuedToken:
    """The token and lifetime in a credentials call's JSON answer (the lifetime a whole number
    of seconds, or its decimal text as QQ sends it); no token is a `ChannelError`."""
    token, lifetime = answer.get(token_key), answer.get(lifetime_key, DEFAULT_LIFETIME_S)
    if not isinstance(token, str) or not token:
        raise ChannelError(f"the credentials call answered no {token_key}", channel=channel)
    try:
        lifetime_s = float(lifetime) if isinstance(lifetime, int | float | str) else None
    except ValueError:
        lifetime_s = None
    return IssuedToken(token, DEFAULT_LIFETIME_S if lifetime_s is None else max(lifetime_s, 1.0))


Fetch = Callable[[], Awaitable[IssuedToken]]


class TokenRefused(ChannelError):
    """The platform refused the token a call carried (expired early, revoked, rotated)."""


#: Refresh this long before the platform's expiry, or at a fifth of a short lifetime.
DEFAULT_EARLY_REFRESH_S = 300.0
DEFAULT_SHORT_LIFETIME_SHARE = 0.2


@dataclass(eq=False)
class AccessTokenCache:
    """One token for every caller of `fetch`: refreshed `early_refresh_s` before it expires, at
    most `short_lifetime_share` of its lifetime early; `credentials_hint` is the suggestion of
    the `AuthError` when even a fresh token is refused."""

    fetch: Fetch
    _: KW_ONLY
    channel: str
    credentials_hint: str
    early_refresh_s: float = DEFAULT_EARLY_REFRESH_S
    short_lifetime_share: float = DEFAULT_SHORT_LIFETIME_SHARE
    clock: Clock = time.monotonic
    _value: str | None = field(default=None, init=False, repr=False)
    _refresh_at: float = field(default=0.0, init=False, repr=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

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
            issued = await self.fetch()
            margin = min(self.early_refresh_s, issued.expires_in_s * self.short_lifetime_share)
            self._value = issued.value
            self._refresh_at = self.clock() + max(0.0, issued.expires_in_s - margin)
            return issued.value

    async def call_with_token(self, call: Callable[[str], Awaitable[T]], *, what: str) -> T:
        """`call(token)`; when it raises `TokenRefused`, once more with a fresh token. A fresh
        token refused as well raises `AuthError`: then the credentials are at fault."""
        token = await self.get()
        try:
            return await call(token)
        except TokenRefused:
            self.invalidate(token)
        token = await self.get()
        try:
            return await call(token)
        except TokenRefused as refused:
            self.invalidate(token)
            raise AuthError(
                f"{what}: a fresh access token was refused as well ({refused.args[0]})",
                channel=self.channel,
                suggestion=self.credentials_hint,
            ) from None

    def invalidate(self, value: str) -> None:
        """The platform refused `value`: the next `get` fetches anew (unless already done)."""
        if self._value == value:
            self._value = None

    def _current(self) -> str | None:
        if self._value is not None and self.clock() < self._refresh_at:
            return self._value
        return None


# One aiohttp session for a channel's life: made on first use, inside the event loop.
#
# An `aiohttp.ClientSession` must be created inside a running loop, so a channel cannot make it
# in `__init__`; and after `close()` (a stopped channel, a `doctor` probe) the next call makes a
# new one. Every aiohttp channel (Feishu, WeCom, QQ, WhatsApp, Twilio's HTTP client) keeps one of
# these instead of its own `None or closed` check.
class LazySession:
    def __init__(
        self, *, timeout_s: float | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s is not None else None
        self._headers = dict(headers or {})
        self._session: aiohttp.ClientSession | None = None

    def get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            if self._timeout is None:
                self._session = aiohttp.ClientSession(headers=self._headers)
            else:
                self._session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        return self._session

    async def close(self) -> None:
        """Close the session if one is open; safe to call twice."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()


# A platform's JSON API authorised by one cached access token: the base of Feishu's and WeCom's.
#
# Both open an aiohttp session lazily, give every request one deadline (`deadline`), fetch their
# token with their own credentials call, and share `AccessTokenCache`'s refresh and refused-token
# retry; what differs (the credentials call, how a request is built, what each error code means)
# is each subclass's.
class TokenApi(ABC):
    """`client_id` and `secret` are the app's credentials (Feishu's app id and secret, WeCom's
    corp id and application secret), sent by `_fetch_token`."""

    channel: ClassVar[str]
    #: The suggestion when even a fresh token is refused.
    credentials_hint: ClassVar[str]
    #: How long one request may take, the session's limit and `deadline`'s alike.
    request_timeout_s: ClassVar[float] = 15.0

    def __init__(self, base_url: str, client_id: str, secret: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.client_id = client_id
        self._secret = secret
        self._session = LazySession(timeout_s=self.request_timeout_s)
        self.tokens = AccessTokenCache(
            self._fetch_token, channel=self.channel, credentials_hint=self.credentials_hint
        )

    def http(self) -> aiohttp.ClientSession:
        return self._session.get()

    async def close(self) -> None:
        await self._session.close()

    def deadline(self, what: str) -> AbstractAsyncContextManager[None]:
        """The `async with` around one request: `request_timeout_s` for it, and its timeout or
        network failure raised as `TransientError` (`platform_call`)."""
        return platform_call(what, self.request_timeout_s, channel=self.channel)

    @abstractmethod
    async def _fetch_token(self) -> IssuedToken:
        """The platform's credentials call: a new token and its lifetime."""
