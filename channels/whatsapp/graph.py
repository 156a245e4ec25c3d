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
from typing import Any

import aiohttp

from channels.errors import TransientError
from channels.web.client import LazySession
from channels.web.webhook import UnreadableJson, json_payload
from channels.whatsapp.errors import CHANNEL, graph_error

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
