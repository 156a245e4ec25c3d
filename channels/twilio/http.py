"""The HTTP client the twilio library's REST classes use here: aiohttp, owned by the channel.

The library's own `AsyncTwilioHttpClient` passes credentials as `aiohttp.BasicAuth`
(deprecated in aiohttp 3.14), ignores its `timeout` (twilio-python #925), opens its session
outside any `async with` (#866) and sends a repeated parameter (`MediaUrl`) in a form aiohttp
refuses. This one keeps the library's request building, error parsing and resources and does
only the transport: one session per channel, closed with it; a deadline per request; the
`Authorization` header built from the library's `(sid, token)` pair; repeated parameters as
repeated fields. A 429 is raised at once as `RateLimited` with Twilio's `Retry-After` (the
library's exception would lose the header).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping

import aiohttp
from twilio.http import AsyncHttpClient
from twilio.http.response import Response

from channels.errors import RateLimited
from channels.retry import retry_after_s
from channels.twilio.errors import CHANNEL
from channels.web.client import LazySession

_log = logging.getLogger("twilio.http_client")

Fields = list[tuple[str, str]]


def basic_auth_header(login: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode("ascii")


def _fields(values: Mapping[str, object] | None) -> Fields | None:
    """Parameters as (name, value) pairs, one pair per value of a list."""
    if not values:
        return None
    pairs: Fields = []
    for name, value in values.items():
        items = value if isinstance(value, list | tuple) else [value]
        pairs.extend((name, str(item)) for item in items if item is not None)
    return pairs


class TwilioHttp(AsyncHttpClient):  # type: ignore[misc]
    def __init__(self, timeout_s: float) -> None:
        super().__init__(_log, True, timeout_s)
        self._timeout_s = timeout_s
        self._session = LazySession()

    async def request(
        self,
        method: str,
        uri: str,
        params: dict[str, object] | None = None,
        data: dict[str, object] | None = None,
        headers: dict[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (the library's interface)
        allow_redirects: bool = False,
    ) -> Response:
        sent_headers = dict(headers or {})
        if auth is not None:
            sent_headers["Authorization"] = basic_auth_header(*auth)
        async with self._session.get().request(
            method.upper(),
            uri,
            params=_fields(params),
            data=_fields(data),
            headers=sent_headers,
            allow_redirects=allow_redirects,
            timeout=aiohttp.ClientTimeout(total=timeout or self._timeout_s),
        ) as answer:
            text = await answer.text()
            if answer.status == 429:
                raise RateLimited(
                    retry_after_s(answer.headers.get("Retry-After")),
                    f"{method.upper()} {answer.url.path}: HTTP 429 ({text[:200]})",
                    channel=CHANNEL,
                )
            return Response(answer.status, text, answer.headers)

    async def close(self) -> None:
        await self._session.close()
