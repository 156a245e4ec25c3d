"""One aiohttp session for a channel's life: made on first use, inside the event loop.

An `aiohttp.ClientSession` must be created inside a running loop, so a channel cannot make it
in `__init__`; and after `close()` (a stopped channel, a `doctor` probe) the next call makes a
new one. Every aiohttp channel (Feishu, WeCom, QQ, WhatsApp, Twilio's HTTP client) keeps one of
these instead of its own `None or closed` check.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp


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
