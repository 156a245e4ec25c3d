"""A platform's JSON API authorised by one cached access token: the base of Feishu's and WeCom's.

Both open an aiohttp session lazily, give every request one deadline (`deadline`), fetch their
token with their own credentials call, and share `AccessTokenCache`'s refresh and refused-token
retry; what differs (the credentials call, how a request is built, what each error code means)
is each subclass's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from typing import ClassVar

import aiohttp

from channels.access_token import AccessTokenCache, IssuedToken
from channels.http_session import LazySession
from channels.platform_call import platform_call


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
