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
from twilio.base.exceptions import TwilioException, TwilioRestException
from twilio.http import AsyncHttpClient
from twilio.http.response import Response

from channels.errors import (
    AuthError,
    ChannelError,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.retry import DEFAULT_RETRY_AFTER_S, answers_of, platform_calls, retry_after_s
from channels.web.client import LazySession

# The twilio library's failures in the words the channel manager's retry policy acts on.
#
# Twilio answers a failed REST call with an HTTP status and a JSON body carrying its own error
# `code` (`{"code": 20429, "message", "more_info", "status": 429}`), which the library raises as
# `TwilioRestException`. Rate limits (HTTP 429, code 20429) carry no `Retry-After` the library
# passes on, so the wait is one second, then the retry policy's own backoff.
CHANNEL = "twilio"

TOO_MANY_REQUESTS = 20429
AUTHENTICATE = 20003
BODY_TOO_LONG = 21617
UNSUBSCRIBED = 21610

_SUGGESTIONS = {
    AUTHENTICATE: "check account_sid and auth_token",
    BODY_TOO_LONG: "the text is over Twilio's 1,600 characters",
    UNSUBSCRIBED: "the recipient texted STOP; they must text START before the bot can answer",
    21211: "the 'To' number is not a valid phone number",
    21606: "from_number is not an SMS-capable Twilio number of this account",
}


def translate(error: TwilioRestException, what: str) -> ChannelError:
    code = error.code if isinstance(error.code, int) else None
    status = error.status
    detail = f"{what}: HTTP {status}" + (f", Twilio error {code}" if code else "")
    if error.msg:
        detail += f" ({error.msg})"
    suggestion = _SUGGESTIONS.get(code or 0, "")
    if status == 429 or code == TOO_MANY_REQUESTS:
        return RateLimited(DEFAULT_RETRY_AFTER_S, detail, channel=CHANNEL)
    if code == BODY_TOO_LONG:
        return MessageTooLong(detail, channel=CHANNEL, suggestion=suggestion)
    if status in (401, 403) or code == AUTHENTICATE:
        return AuthError(
            detail, channel=CHANNEL, suggestion=suggestion or _SUGGESTIONS[AUTHENTICATE]
        )
    if status >= 500:
        return TransientError(detail, channel=CHANNEL, suggestion="Twilio is having trouble")
    return ChannelError(detail, channel=CHANNEL, suggestion=suggestion)


#: REST calls with a deadline (the async client ignores its own timeout), raising only
#: `channels.errors` types.
twilio_call = platform_calls(
    channel=CHANNEL,
    sdk_errors=(TwilioException,),
    translate=answers_of(TwilioRestException, translate, channel=CHANNEL),
)


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
