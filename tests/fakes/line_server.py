"""A fake LINE Platform on 127.0.0.1: the Messaging API subset the LINE channel uses, the data
API for downloads, and webhook deliveries to the gateway signed like LINE signs them.

line-bot-sdk v3 (its async Messaging API) runs against it unchanged; only the far end is ours.

    async with FakeLine() as fake:
        config: api_base_url=fake.api_base_url, data_api_base_url=fake.data_api_base_url,
                channel_secret=fake.channel_secret, channel_access_token=fake.access_token
        event = fake.text_event(USER, "hi")
        status = await fake.deliver(webhook_url, [event])
        await fake.wait_until(lambda: fake.texts_to(USER))

Messaging API (`Authorization: Bearer <token>`, JSON): `GET /v2/bot/info`,
`POST /v2/bot/message/reply` (each reply token once, within its lifetime),
`POST /v2/bot/message/push` (`X-Line-Retry-Key`, a UUID: a key already accepted answers 409),
`POST /v2/bot/chat/loading/start`. At most 5 messages per request and 5,000 UTF-16 code units
per text, as LINE checks; a message's `quickReply` has at most 13 items, each a postback
(`data` of at most 300 characters) or URI action with a label of at most 20 characters. A tap
of a postback item comes back as a `postback` event (`postback_event`); an image message needs
HTTPS `originalContentUrl` and `previewImageUrl` (LINE fetches them later; the fake only
records them). Errors have LINE's
shape, `{"message": ..., "details": [...]}`; a rate limit is HTTP 429
`{"message": "Too Many Requests"}`. Data API:
`GET /v2/bot/message/{id}/content` serves what `host_content` put there.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self

import aiohttp
from aiohttp import web

from channels.line.webhook import SIGNATURE_HEADER, signature_of
from tests.fakes import LocalHttpServer
from tests.fakes.changes import Changes
from tests.fakes.outage import Outage

JsonObject = dict[str, Any]

MAX_MESSAGES_PER_REQUEST = 5
MAX_TEXT_UTF16 = 5000
MAX_QUICK_REPLY_ITEMS = 13
MAX_ACTION_LABEL = 20
MAX_POSTBACK_DATA = 300
BOT_USER_ID = "U0000000000000000000000000000b0t"


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@dataclass(frozen=True, slots=True)
class RecordedCall:
    path: str
    body: JsonObject
    headers: dict[str, str]
    status: int
    at: float


@dataclass
class _Failure:
    path: str
    status: int
    body: JsonObject
    headers: dict[str, str]
    remaining: int


@dataclass(frozen=True, slots=True)
class Delivered:
    """A message LINE accepted for a chat, by reply or by push."""

    chat_id: str
    message: JsonObject
    via: str
    retry_key: str | None


class FakeLine:
    def __init__(
        self,
        *,
        channel_secret: str = "fake-line-channel-secret",
        access_token: str = "fake-line-access-token",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.channel_secret = channel_secret
        self.access_token = access_token
        self._clock = clock
        self.calls: list[RecordedCall] = []
        self.delivered: list[Delivered] = []
        self.loading: list[JsonObject] = []
        self.contents: dict[str, tuple[bytes, str]] = {}
        self.content_requests: list[str] = []
        self.webhook_statuses: list[int] = []
        self._reply_tokens: dict[str, tuple[str, float]] = {}
        self._retry_keys: dict[str, list[str]] = {}
        self._failures: list[_Failure] = []
        self._ids = itertools.count(1)
        self._changes = Changes()
        #: `async with fake.outage.down():` answers every request 500 (see `Outage`).
        self.outage = Outage()
        self._api = LocalHttpServer(self._api_app())
        self._data = LocalHttpServer(self._data_app())
        self.reply_token_ttl_s = 60.0

    def _api_app(self) -> web.Application:
        app = web.Application(middlewares=[self.outage.middleware])
        app.router.add_get("/v2/bot/info", self._bot_info)
        app.router.add_post("/v2/bot/message/reply", self._reply)
        app.router.add_post("/v2/bot/message/push", self._push)
        app.router.add_post("/v2/bot/chat/loading/start", self._loading)
        return app

    def _data_app(self) -> web.Application:
        app = web.Application(middlewares=[self.outage.middleware])
        app.router.add_get("/v2/bot/message/{message_id}/content", self._content)
        return app

    async def __aenter__(self) -> Self:
        await self._api.__aenter__()
        await self._data.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._data.__aexit__(*exc_info)
        await self._api.__aexit__(*exc_info)

    @property
    def api_base_url(self) -> str:
        return self._api.origin

    @property
    def data_api_base_url(self) -> str:
        return self._data.origin

    # What the test reads

    def calls_to(self, path: str) -> list[RecordedCall]:
        return [call for call in self.calls if call.path == path]

    def texts_to(self, chat_id: str) -> list[str]:
        return [str(d.message.get("text", "")) for d in self.delivered if d.chat_id == chat_id]

    def delivered_to(self, chat_id: str) -> list[Delivered]:
        return [d for d in self.delivered if d.chat_id == chat_id]

    async def wait_until(self, predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
        """Wait until `predicate()` is true; checked after every change the fake sees."""
        await self._changes.wait_until(predicate, timeout_s)

    # The world: events LINE would send, signed as LINE signs them

    def new_id(self) -> str:
        return f"{next(self._ids):018d}"

    def text_event(
        self,
        user_id: str,
        text: str,
        *,
        group_id: str | None = None,
        timestamp_ms: int | None = None,
        redelivery: bool = False,
    ) -> JsonObject:
        event = self._message_event(user_id, group_id, timestamp_ms, redelivery)
        event["message"] = {
            "type": "text",
            "id": self.new_id(),
            "text": text,
            "quoteToken": uuid.uuid4().hex,
        }
        return event

    def edit_event(
        self, sent: JsonObject, text: str, *, timestamp_ms: int | None = None
    ) -> JsonObject:
        """The sender of the text message event `sent` edits it to `text` (LINE sends this in
        group chats only): the same message id, a new event, a new reply token."""
        source = sent["source"]
        event = self._message_event(source["userId"], source.get("groupId"), timestamp_ms, False)
        event["type"] = "messageEdited"
        event["message"] = {**sent["message"], "text": text}
        return event

    def unsend_event(self, sent: JsonObject) -> JsonObject:
        """The sender of the message event `sent` takes it back: no reply token."""
        source = sent["source"]
        event = self._message_event(source["userId"], source.get("groupId"), None, False)
        event.pop("replyToken")
        event["type"] = "unsend"
        event["unsend"] = {"messageId": sent["message"]["id"]}
        return event

    def postback_event(self, user_id: str, data: str, *, group_id: str | None = None) -> JsonObject:
        """The user taps a postback quick reply item whose `data` was `data`."""
        event = self._message_event(user_id, group_id, None, False)
        event["type"] = "postback"
        event["postback"] = {"data": data}
        return event

    def quick_replies_to(self, chat_id: str) -> list[list[JsonObject]]:
        """The quick reply actions of each message delivered to the chat (empty where none)."""
        return [
            [item["action"] for item in d.message.get("quickReply", {}).get("items", [])]
            for d in self.delivered_to(chat_id)
        ]

    def image_event(self, user_id: str, data: bytes, *, mimetype: str = "image/jpeg") -> JsonObject:
        return self.media_event(user_id, "image", data, mimetype=mimetype)

    def media_event(
        self,
        user_id: str,
        kind: str,
        data: bytes,
        *,
        mimetype: str,
        duration_ms: int | None = None,
        file_name: str | None = None,
        stated_size: int | None = None,
    ) -> JsonObject:
        """A user sends an image, video, audio or file, as LINE's webhook describes each: audio
        and video with their `duration`, a file with its `fileName` and `fileSize`."""
        event = self._message_event(user_id, None, None, False)
        message_id = self.new_id()
        self.contents[message_id] = (data, mimetype)
        message: JsonObject = {"type": kind, "id": message_id}
        if kind == "file":
            message["fileName"] = file_name or "file"
            message["fileSize"] = len(data) if stated_size is None else stated_size
        else:
            message["contentProvider"] = {"type": "line"}
        if kind in ("image", "video"):
            message["quoteToken"] = uuid.uuid4().hex
        if duration_ms is not None:
            message["duration"] = duration_ms
        event["message"] = message
        return event

    def _message_event(
        self, user_id: str, group_id: str | None, timestamp_ms: int | None, redelivery: bool
    ) -> JsonObject:
        token = uuid.uuid4().hex
        chat_id = group_id or user_id
        self._reply_tokens[token] = (chat_id, self._clock() + self.reply_token_ttl_s)
        source: JsonObject = (
            {"type": "group", "groupId": group_id, "userId": user_id}
            if group_id
            else {"type": "user", "userId": user_id}
        )
        return {
            "type": "message",
            "mode": "active",
            "timestamp": int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
            "source": source,
            "webhookEventId": "01" + uuid.uuid4().hex[:24].upper(),
            "deliveryContext": {"isRedelivery": redelivery},
            "replyToken": token,
        }

    def body_of(self, events: Sequence[JsonObject]) -> bytes:
        return json.dumps({"destination": BOT_USER_ID, "events": list(events)}).encode()

    def sign(self, body: bytes, secret: str | None = None) -> dict[str, str]:
        return {
            SIGNATURE_HEADER: signature_of(secret or self.channel_secret, body),
            "Content-Type": "application/json",
        }

    async def post_webhook(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        """POST a body to the gateway as LINE does; the answer's status."""
        timeout = aiohttp.ClientTimeout(total=30)
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.post(url, data=body, headers=headers) as response,
        ):
            await response.read()
            self.webhook_statuses.append(response.status)
            return response.status

    async def deliver(self, url: str, events: Sequence[JsonObject]) -> int:
        body = self.body_of(events)
        return await self.post_webhook(url, body, self.sign(body))

    # Failures

    def fail_next(
        self,
        path: str,
        status: int,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        times: int = 1,
    ) -> None:
        self._failures.append(_Failure(path, status, {"message": message}, headers or {}, times))

    def rate_limit_next(self, path: str, *, times: int = 1) -> None:
        self.fail_next(path, 429, "Too Many Requests", times=times)

    # Handlers

    async def _record(self, request: web.Request, body: JsonObject, status: int) -> None:
        self.calls.append(
            RecordedCall(request.path, body, dict(request.headers), status, self._clock())
        )
        await self._changes.notify()

    async def _answer(
        self, request: web.Request, handler: Callable[[JsonObject, web.Request], tuple[int, Any]]
    ) -> web.Response:
        try:
            body: JsonObject = await request.json() if request.can_read_body else {}
        except ValueError:
            body = {}
        if request.headers.get("Authorization") != f"Bearer {self.access_token}":
            status, answer = (
                401,
                {
                    "message": "Authentication failed. Confirm that the access "
                    "token in the authorization header is valid."
                },
            )
            headers: dict[str, str] = {}
        elif (failure := self._injected(request.path)) is not None:
            status, answer, headers = failure.status, failure.body, failure.headers
        else:
            status, answer = handler(body, request)
            headers = {}
        await self._record(request, body, status)
        return web.json_response(answer, status=status, headers=headers)

    def _injected(self, path: str) -> _Failure | None:
        for failure in self._failures:
            if failure.remaining > 0 and failure.path == path:
                failure.remaining -= 1
                return failure
        return None

    async def _bot_info(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            lambda _body, _request: (
                200,
                {
                    "userId": BOT_USER_ID,
                    "basicId": "@123fake",
                    "displayName": "Fake LINE bot",
                    "chatMode": "bot",
                    "markAsReadMode": "auto",
                },
            ),
        )

    def _check_messages(self, body: JsonObject) -> tuple[int, JsonObject] | None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not 1 <= len(messages) <= MAX_MESSAGES_PER_REQUEST:
            return 400, {
                "message": "The request body has 1 error(s)",
                "details": [{"message": "Size must be between 1 and 5", "property": "messages"}],
            }
        for index, message in enumerate(messages):
            refusal = _quick_reply_refusal(message, index)
            if refusal is not None:
                return 400, refusal
            if isinstance(message, dict) and message.get("type") == "image":
                urls = (message.get("originalContentUrl"), message.get("previewImageUrl"))
                if all(isinstance(url, str) and url.startswith("https://") for url in urls):
                    continue
                return 400, {
                    "message": "The request body has 1 error(s)",
                    "details": [
                        {
                            "message": "must be a valid HTTPS URL",
                            "property": f"messages[{index}].originalContentUrl",
                        }
                    ],
                }
            text = message.get("text") if isinstance(message, dict) else None
            if not isinstance(text, str) or not 1 <= utf16_units(text) <= MAX_TEXT_UTF16:
                return 400, {
                    "message": "The request body has 1 error(s)",
                    "details": [
                        {
                            "message": "Length must be between 0 and 5000",
                            "property": f"messages[{index}].text",
                        }
                    ],
                }
        return None

    def _sent(self, chat_id: str, body: JsonObject, via: str, key: str | None) -> JsonObject:
        sent = []
        for message in body["messages"]:
            self.delivered.append(Delivered(chat_id, message, via, key))
            sent.append({"id": self.new_id(), "quoteToken": uuid.uuid4().hex})
        return {"sentMessages": sent}

    async def _reply(self, request: web.Request) -> web.Response:
        def handle(body: JsonObject, _request: web.Request) -> tuple[int, Any]:
            if (refused := self._check_messages(body)) is not None:
                return refused
            entry = self._reply_tokens.pop(str(body.get("replyToken")), None)
            if entry is None or entry[1] < self._clock():
                return 400, {"message": "Invalid reply token"}
            return 200, self._sent(entry[0], body, "reply", None)

        return await self._answer(request, handle)

    async def _push(self, request: web.Request) -> web.Response:
        def handle(body: JsonObject, request: web.Request) -> tuple[int, Any]:
            key = request.headers.get("X-Line-Retry-Key")
            if key is not None:
                try:
                    uuid.UUID(key)
                except ValueError:
                    return 400, {"message": "The value of the X-Line-Retry-Key header is invalid"}
                if key in self._retry_keys:
                    return 409, {
                        "message": "The retry key is already accepted",
                        "sentMessages": [{"id": i} for i in self._retry_keys[key]],
                    }
            if (refused := self._check_messages(body)) is not None:
                return refused
            to = str(body.get("to", ""))
            if not to.startswith(("U", "C", "R")):
                return 400, {"message": "Failed to send messages"}
            answer = self._sent(to, body, "push", key)
            if key is not None:
                self._retry_keys[key] = [m["id"] for m in answer["sentMessages"]]
            return 200, answer

        return await self._answer(request, handle)

    async def _loading(self, request: web.Request) -> web.Response:
        def handle(body: JsonObject, _request: web.Request) -> tuple[int, Any]:
            seconds = body.get("loadingSeconds", 20)
            if not isinstance(seconds, int) or seconds % 5 or not 5 <= seconds <= 60:
                return 400, {"message": "The request body has 1 error(s)"}
            self.loading.append(body)
            return 202, {}

        return await self._answer(request, handle)

    async def _content(self, request: web.Request) -> web.Response:
        message_id = request.match_info["message_id"]
        self.content_requests.append(message_id)
        await self._changes.notify()
        if request.headers.get("Authorization") != f"Bearer {self.access_token}":
            return web.json_response({"message": "Authentication failed"}, status=401)
        found = self.contents.get(message_id)
        if found is None:
            return web.json_response({"message": "Not found"}, status=404)
        return web.Response(body=found[0], content_type=found[1])


def _quick_reply_refusal(message: object, index: int) -> JsonObject | None:
    """LINE's 400 body for a message whose quick reply breaks its limits, or None."""
    quick = message.get("quickReply") if isinstance(message, dict) else None
    if quick is None:
        return None
    where = f"messages[{index}].quickReply"
    items = quick.get("items") if isinstance(quick, dict) else None
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_QUICK_REPLY_ITEMS:
        return _invalid("Size must be between 1 and 13", f"{where}.items")
    for number, item in enumerate(items):
        action = item.get("action") if isinstance(item, dict) else None
        at = f"{where}.items[{number}].action"
        if not isinstance(action, dict) or action.get("type") not in ("postback", "uri"):
            return _invalid("Must be one of the following values: [postback, uri]", f"{at}.type")
        label = action.get("label")
        if not isinstance(label, str) or not 1 <= len(label) <= MAX_ACTION_LABEL:
            return _invalid("Length must be between 1 and 20", f"{at}.label")
        data = action.get("data")
        if action["type"] == "postback" and (
            not isinstance(data, str) or not 1 <= len(data) <= MAX_POSTBACK_DATA
        ):
            return _invalid("Length must be between 1 and 300", f"{at}.data")
    return None


def _invalid(message: str, prop: str) -> JsonObject:
    return {
        "message": "The request body has 1 error(s)",
        "details": [{"message": message, "property": prop}],
    }
