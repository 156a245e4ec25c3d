"""The slice of the Graph API the WhatsApp channel uses, over aiohttp.

pywa and the other libraries hard-code graph.facebook.com, so this talks to `api_base_url`
(which includes the API version) directly: `POST /{phone_number_id}/messages` to send text and
media and to mark a message read with the typing indicator, `POST /{phone_number_id}/media` to
upload, `GET /{media_id}` for a download URL, `GET /{phone_number_id}` for who the bot is.
Every request has a deadline and carries the bearer token; failures are raised as
`channels.errors` types (see `errors.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp

from channels.errors import AuthError, ChannelError, DeliveryError, RateLimited, TransientError
from channels.web.client import LazySession
from channels.web.webhook import UnreadableJson, json_payload

# Graph API failures in the words the channel manager's retry policy acts on.
#
# The Cloud API answers a failed call with a 4xx/5xx status and
# `{"error": {"message", "type", "code", "error_subcode", "error_data": {"details"},
# "fbtrace_id"}}`; the `code` says what happened, the HTTP status (usually 400) hardly does.
CHANNEL = "whatsapp"

#: Cloud API throughput reached (about 80 messages a second per number).
THROUGHPUT = 130429
#: Too many messages to one recipient in a short time (about one every 6 s).
PAIR_RATE = 131056
#: The user last wrote over 24 hours ago: only a template message may be sent now.
OUTSIDE_WINDOW = 131047
#: The access token expired or was revoked.
TOKEN = 190
#: Graph API application or account rate limits.
APP_RATE_LIMITS = frozenset({4, 17, 32, 613, 80007})
#: WhatsApp's own trouble: worth another try.
SERVICE_ERRORS = frozenset({1, 2, 131000, 131016})

#: The metric reason of a reply given up on because the 24-hour window is closed.
OUTSIDE_WINDOW_REASON = "outside_window"

_WAIT_S = {THROUGHPUT: 1.0, PAIR_RATE: 6.0}
_APP_RATE_WAIT_S = 60.0


class TokenRejected(AuthError):
    """Error 190: the access token is no longer valid; the channel is Down until replaced."""


def graph_error(status: int, body: object, what: str) -> ChannelError:
    """The typed error for one failed Graph call (`body` is the decoded JSON, if any)."""
    error: Mapping[str, Any] = {}
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        error = body["error"]
    code = error.get("code") if isinstance(error.get("code"), int) else None
    message = str(error.get("message", ""))[:300]
    details = error.get("error_data", {})
    if isinstance(details, Mapping) and details.get("details"):
        message += f" ({str(details['details'])[:300]})"
    detail = f"{what}: HTTP {status}" + (f", error {code}" if code is not None else "")
    if message:
        detail += f": {message}"
    if code in _WAIT_S:
        # The pair rate is one user's; throughput is the whole number's.
        return RateLimited(_WAIT_S[code], detail, account_wide=code == THROUGHPUT, channel=CHANNEL)
    if code in APP_RATE_LIMITS or status == 429:
        return RateLimited(_APP_RATE_WAIT_S, detail, account_wide=True, channel=CHANNEL)
    if code == OUTSIDE_WINDOW:
        # Not retried: only a template message can reopen the conversation.
        return DeliveryError(detail, reason=OUTSIDE_WINDOW_REASON, channel=CHANNEL, attempts=1)
    if code == TOKEN or status == 401:
        return TokenRejected(
            detail, channel=CHANNEL, suggestion="replace access_token with a valid one"
        )
    if status >= 500 or code in SERVICE_ERRORS:
        return TransientError(detail, channel=CHANNEL, suggestion="WhatsApp is having trouble")
    return ChannelError(detail, channel=CHANNEL)


JsonObject = dict[str, Any]


class GraphClient:
    def __init__(
        self, *, base_url: str, access_token: str, phone_number_id: str, timeout_s: float = 30.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.phone_number_id = phone_number_id
        self.timeout_s = timeout_s
        self.auth_header = {"Authorization": f"Bearer {access_token}"}
        self._session = LazySession(headers=self.auth_header)

    @property
    def session(self) -> aiohttp.ClientSession:
        """One session for the channel's life, made inside the event loop."""
        return self._session.get()

    async def close(self) -> None:
        await self._session.close()

    async def call(
        self,
        method: str,
        path: str,
        what: str,
        *,
        json_body: JsonObject | None = None,
        form: aiohttp.FormData | None = None,
        params: dict[str, str] | None = None,
    ) -> JsonObject:
        url = f"{self.base_url}/{path.lstrip('/')}"
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                self.session.request(
                    method, url, json=json_body, data=form, params=params
                ) as response,
            ):
                text = await response.text()
                status = response.status
        except TimeoutError as error:
            raise TransientError(
                f"{what} timed out after {self.timeout_s:g} s", channel=CHANNEL
            ) from error
        except (aiohttp.ClientError, OSError) as error:
            raise TransientError(f"{what} failed: {error!r}", channel=CHANNEL) from error
        try:
            body: object = json_payload(text) if text else {}
        except UnreadableJson:
            body = {}
        if status >= 400:
            raise graph_error(status, body, what)
        return body if isinstance(body, dict) else {}

    # The calls

    async def whoami(self) -> JsonObject:
        return await self.call(
            "GET",
            self.phone_number_id,
            "fetch phone number",
            params={"fields": "display_phone_number,verified_name"},
        )

    async def send(self, to: str, kind: str, content: JsonObject) -> str | None:
        """Send one message of `kind` (text, image, document, ...); its wamid."""
        body = {
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": to,
            "type": kind,
            kind: content,
        }
        answer = await self.call("POST", f"{self.phone_number_id}/messages", "send", json_body=body)
        messages = answer.get("messages")
        if isinstance(messages, list) and messages and isinstance(messages[0], dict):
            wamid = messages[0].get("id")
            return wamid if isinstance(wamid, str) else None
        return None

    async def mark_read(self, message_id: str, *, typing: bool) -> None:
        body: JsonObject = {
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": message_id,
        }
        if typing:
            body["typing_indicator"] = {"type": "text"}
        await self.call("POST", f"{self.phone_number_id}/messages", "mark read", json_body=body)

    async def media_url(self, media_id: str) -> JsonObject:
        return await self.call("GET", media_id, "fetch media url")

    async def upload(self, data: bytes, file_name: str, mime_type: str) -> str:
        form = aiohttp.FormData()
        form.add_field("messaging_product", "whatsapp")
        form.add_field("type", mime_type)
        form.add_field("file", data, filename=file_name, content_type=mime_type)
        answer = await self.call("POST", f"{self.phone_number_id}/media", "upload", form=form)
        media_id = answer.get("id")
        if not isinstance(media_id, str):
            raise TransientError("upload answered without a media id", channel=CHANNEL)
        return media_id
