"""A fake Twilio on 127.0.0.1: the Messages API, account fetch, MMS media, signed webhooks.

The real twilio library runs against it unchanged (its async client, pointed at `base_url`);
only the far end is ours. It also plays Twilio's side of the webhook: `webhook_form` builds the
form Twilio posts for an inbound SMS/MMS and `signed_headers` signs it as Twilio does, computed
here from the documented algorithm with hmac and hashlib (not with the library under test):
base64(HMAC-SHA1(auth_token, url + each name and value, sorted by name)).

    async with FakeTwilio() as fake:
        ... TwilioChannel(TwilioConfig(account_sid=fake.account_sid, auth_token=...,
                          api_base_url=fake.base_url, from_number=fake.number, ...), ...) ...
        form = fake.webhook_form("+15550001111", "hello")
        await post_form(url, form, fake.signed_headers(PUBLIC_URL, form))
        await fake.wait_until(lambda: fake.texts_to("+15550001111"))

REST answers have Twilio's shapes: 201 with the message resource; errors as
`{"code", "message", "more_info", "status"}` (20003 bad credentials, 20429 too many requests,
21211 invalid 'To', 21617 body over 1,600 characters). `rate_limit_next(n)` refuses the next n
sends with 429/20429.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes import ServedFake
from tests.fakes.changes import Changes

MAX_BODY_CHARS = 1600
FormParams = Mapping[str, Sequence[str]]


def twilio_signature(auth_token: str, url: str, params: FormParams) -> str:
    """X-Twilio-Signature of a POST of `params` to `url`."""
    payload = url + "".join(
        name + value for name in sorted(params) for value in sorted(params[name])
    )
    digest = hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


async def post_form(
    url: str, params: FormParams, headers: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    """POST a form as Twilio does; the status, content type and body of the answer."""
    fields = [(name, value) for name, values in params.items() for value in values]
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=fields, headers=dict(headers or {})) as response,
    ):
        return response.status, response.content_type, await response.text()


@dataclass(frozen=True, slots=True)
class SentMessage:
    sid: str
    to: str
    sender: str
    body: str
    media_urls: tuple[str, ...]
    at: float


@dataclass(frozen=True, slots=True)
class RecordedCall:
    path: str
    status: int
    code: int | None
    at: float


class FakeTwilio(ServedFake):
    def __init__(
        self,
        *,
        account_sid: str = "AC" + "0123456789abcdef" * 2,
        auth_token: str = "fake-twilio-auth-token",
        number: str = "+15005550006",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.number = number
        self.friendly_name = "Fake Twilio account"
        self.sent: list[SentMessage] = []
        self.calls: list[RecordedCall] = []
        self.media: dict[str, tuple[bytes, str]] = {}
        self.media_fetches: list[str] = []
        self._rate_limited = 0
        self._retry_after_s: int | None = None
        self._clock = clock
        self._ids = itertools.count(1)
        self._changes = Changes()
        app = web.Application()
        prefix = f"/2010-04-01/Accounts/{account_sid}"
        app.router.add_post(f"{prefix}/Messages.json", self._create_message)
        app.router.add_get(f"{prefix}.json", self._fetch_account)
        app.router.add_get("/media/{media_id}", self._fetch_media)
        ServedFake.__init__(self, app)

    @property
    def base_url(self) -> str:
        return self.origin

    # What happened

    def texts_to(self, number: str) -> list[str]:
        return [message.body for message in self.sent if message.to == number]

    def send_statuses(self) -> list[int]:
        return [call.status for call in self.calls if call.path.endswith("/Messages.json")]

    async def wait_until(self, predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
        await self._changes.wait_until(predicate, timeout_s)

    # The world

    def rate_limit_next(self, count: int = 1, *, retry_after_s: int | None = None) -> None:
        """Refuse the next `count` sends with 429/20429 (and `Retry-After`, when given)."""
        self._rate_limited += count
        self._retry_after_s = retry_after_s

    def host_media(self, data: bytes, content_type: str) -> str:
        """Serve a file as Twilio serves MMS media (basic auth); returns its URL."""
        media_id = f"ME{next(self._ids):032x}"
        self.media[media_id] = (data, content_type)
        return f"{self.base_url}/media/{media_id}"

    def webhook_form(
        self,
        sender: str,
        body: str,
        *,
        sid: str | None = None,
        media: Sequence[tuple[str, str]] = (),
        opt_out_type: str | None = None,
    ) -> dict[str, list[str]]:
        """The form Twilio posts for one inbound message; `media` is (url, content type)."""
        form = {
            "MessageSid": [sid or f"SM{next(self._ids):032x}"],
            "SmsSid": [sid or ""],
            "AccountSid": [self.account_sid],
            "From": [sender],
            "To": [self.number],
            "Body": [body],
            "NumMedia": [str(len(media))],
            "NumSegments": ["1"],
            "ApiVersion": ["2010-04-01"],
        }
        form["SmsSid"] = form["MessageSid"]
        for index, (url, content_type) in enumerate(media):
            form[f"MediaUrl{index}"] = [url]
            form[f"MediaContentType{index}"] = [content_type]
        if opt_out_type is not None:
            form["OptOutType"] = [opt_out_type]
        return form

    def signed_headers(
        self, url: str, params: FormParams, *, auth_token: str | None = None
    ) -> dict[str, str]:
        return {"X-Twilio-Signature": twilio_signature(auth_token or self.auth_token, url, params)}

    # The API

    def _authorised(self, request: web.Request) -> bool:
        pair = f"{self.account_sid}:{self.auth_token}".encode()
        expected = "Basic " + base64.b64encode(pair).decode()
        return hmac.compare_digest(request.headers.get("Authorization", ""), expected)

    async def _error(
        self,
        request: web.Request,
        status: int,
        code: int,
        text: str,
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        await self._record(request, status, code)
        body = {
            "code": code,
            "message": text,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        }
        return web.json_response(body, status=status, headers=headers)

    async def _record(self, request: web.Request, status: int, code: int | None) -> None:
        self.calls.append(RecordedCall(request.path, status, code, self._clock()))
        await self._changes.notify()

    async def _fetch_account(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return await self._error(request, 401, 20003, "Authenticate")
        await self._record(request, 200, None)
        return web.json_response(
            {"sid": self.account_sid, "friendly_name": self.friendly_name, "status": "active"}
        )

    async def _create_message(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return await self._error(request, 401, 20003, "Authenticate")
        form = await request.post()
        to, body = str(form.get("To", "")), str(form.get("Body", ""))
        sender = str(form.get("From") or form.get("MessagingServiceSid") or "")
        if self._rate_limited > 0:
            self._rate_limited -= 1
            wait = self._retry_after_s
            headers = {"Retry-After": str(wait)} if wait is not None else None
            return await self._error(request, 429, 20429, "Too Many Requests", headers)
        if not to.startswith("+") or not to[1:].isdigit():
            return await self._error(request, 400, 21211, f"The 'To' number {to} is not valid.")
        if not sender:
            return await self._error(request, 400, 21603, "A 'From' phone number is required.")
        if len(body) > MAX_BODY_CHARS:
            return await self._error(
                request, 400, 21617, "The concatenated message body exceeds the 1600 limit."
            )
        sid = f"SM{next(self._ids):032x}"
        media = tuple(str(url) for url in form.getall("MediaUrl", []))
        self.sent.append(SentMessage(sid, to, sender, body, media, self._clock()))
        await self._record(request, 201, None)
        resource: dict[str, Any] = {
            "sid": sid,
            "account_sid": self.account_sid,
            "to": to,
            "from": sender,
            "body": body,
            "status": "queued",
            "num_media": str(len(media)),
            "num_segments": "1",
            "api_version": "2010-04-01",
            "uri": f"/2010-04-01/Accounts/{self.account_sid}/Messages/{sid}.json",
        }
        return web.json_response(resource, status=201)

    async def _fetch_media(self, request: web.Request) -> web.Response:
        media_id = request.match_info["media_id"]
        self.media_fetches.append(media_id)
        if not self._authorised(request):
            return web.Response(status=401, text="Authenticate")
        if media_id not in self.media:
            return web.Response(status=404)
        data, content_type = self.media[media_id]
        return web.Response(body=data, content_type=content_type)
