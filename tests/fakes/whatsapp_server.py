"""A fake WhatsApp Cloud API on 127.0.0.1: Graph API messages, media, read receipts, and
Meta's side of the webhook (notification payloads, X-Hub-Signature-256).

The WhatsApp channel's aiohttp code runs against it unchanged; `base_url` includes the API
version, as the real `https://graph.facebook.com/v21.0` does.

    async with FakeWhatsApp() as fake:
        ... WhatsAppChannel(WhatsAppConfig(access_token=fake.access_token,
                            phone_number_id=fake.phone_number_id, api_base_url=fake.base_url,
                            ...), ...) ...
        body = fake.text_notification("15550001111", "hello")
        await post_json(url, body, fake.signed_headers(body))
        await fake.wait_until(lambda: fake.texts_to("15550001111"))

Errors have Graph's shape, `{"error": {"message", "type", "code", "error_data", "fbtrace_id"}}`
with status 400 (401 for a bad token, code 190): `fail_next(code)` refuses the next send with a
code (130429 throughput, 131056 pair rate, 131047 outside the 24-hour window, ...), and a text
over 4,096 characters is refused with code 100, as is an `interactive` message past Meta's
limits (1-3 reply buttons of titles up to 20 characters, or a list of 1-10 rows up to 24; a
body up to 1,024; ids up to 256). `tap_notification` is a user's choice of one. A `reaction`
(`message_id`, `emoji`; an empty emoji takes it back) is recorded in `sent` like any message;
`reaction_notification` is a user's reaction to a bot message, as Meta's "Reaction messages
webhook reference" shows it (`reaction: {"message_id", "emoji"}`, the `emoji` left out when the
user takes the reaction back).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes import HoldableFake
from tests.fakes.changes import Changes

API_VERSION = "v21.0"
MAX_TEXT_CHARS = 4096
JsonObject = dict[str, Any]

_ERROR_MESSAGES = {
    100: "Invalid parameter",
    130429: "Rate limit hit",
    131056: "(Business Account, Consumer Account) pair rate limit hit",
    131047: "Re-engagement message",
    190: "Invalid OAuth access token - Cannot parse access token",
}


def hub_signature(app_secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()


async def post_json(
    url: str, body: bytes, headers: Mapping[str, str] | None = None
) -> tuple[int, str]:
    """POST raw JSON bytes as Meta does; the status and text of the answer."""
    sent = {"Content-Type": "application/json", **dict(headers or {})}
    async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=sent) as answer:
        return answer.status, await answer.text()


@dataclass(frozen=True, slots=True)
class SentMessage:
    wamid: str
    to: str
    kind: str
    content: JsonObject
    at: float

    @property
    def text(self) -> str:
        return str(self.content.get("body", ""))


@dataclass(frozen=True, slots=True)
class ReadReceipt:
    message_id: str
    typing: bool
    at: float


class FakeWhatsApp(HoldableFake):
    def __init__(
        self,
        *,
        access_token: str = "EAAfake-whatsapp-access-token",
        phone_number_id: str = "106540352242922",
        app_secret: str = "fake-app-secret",
        verify_token: str = "fake-verify-token",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.access_token = access_token
        self.phone_number_id = phone_number_id
        self.app_secret = app_secret
        self.verify_token = verify_token
        self.display_number = "+1 555-000-0000"
        self.sent: list[SentMessage] = []
        self.reads: list[ReadReceipt] = []
        #: (status, error code or None) of every send, in order.
        self.send_results: list[tuple[int, int | None]] = []
        self.uploads: dict[str, tuple[bytes, str, str]] = {}
        self.media: dict[str, tuple[bytes, str]] = {}
        self.media_downloads: list[str] = []
        #: Media ids whose download the fake corrupts (a digest mismatch to detect).
        self.corrupt_media: set[str] = set()
        self._failures: list[int] = []
        #: While True, the phone number lookup (the channel's token check) waits on `control`.
        self.hold_lookups = False
        self._clock = clock
        self._ids = itertools.count(1)
        self._changes = Changes()
        app = web.Application(client_max_size=32 * 1024 * 1024)
        base = f"/{API_VERSION}"
        app.router.add_post(f"{base}/{phone_number_id}/messages", self._messages)
        app.router.add_post(f"{base}/{phone_number_id}/media", self._upload)
        app.router.add_get(f"{base}/{phone_number_id}", self._phone_number)
        app.router.add_get(f"{base}/{{media_id}}", self._media_url)
        app.router.add_get("/download/{media_id}", self._download)
        HoldableFake.__init__(self, app)

    @property
    def base_url(self) -> str:
        return f"{self.origin}/{API_VERSION}"

    # What happened

    def texts_to(self, wa_id: str) -> list[str]:
        return [m.text for m in self.sent if m.to == wa_id and m.kind == "text"]

    async def wait_until(self, predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
        await self._changes.wait_until(predicate, timeout_s)

    # The world

    def fail_next(self, code: int, count: int = 1) -> None:
        self._failures.extend([code] * count)

    def host_media(self, data: bytes, mime_type: str) -> str:
        """A file a user sent; returns its media id."""
        media_id = str(next(self._ids) + 900_000_000)
        self.media[media_id] = (data, mime_type)
        return media_id

    def new_wamid(self) -> str:
        return f"wamid.HBgL{next(self._ids):020d}FQIAERgS"

    def notification(self, value: JsonObject) -> bytes:
        value = {
            "messaging_product": "whatsapp",
            "metadata": {
                "display_phone_number": "15550000000",
                "phone_number_id": self.phone_number_id,
            },
            **value,
        }
        payload = {
            "object": "whatsapp_business_account",
            "entry": [
                {"id": "102290129340398", "changes": [{"value": value, "field": "messages"}]}
            ],
        }
        return json.dumps(payload).encode()

    def message_notification(
        self,
        sender: str,
        kind: str,
        content: JsonObject,
        *,
        wamid: str | None = None,
        timestamp: float | None = None,
        name: str = "Alice",
    ) -> bytes:
        message = {
            "from": sender,
            "id": wamid or self.new_wamid(),
            "timestamp": str(int(time.time() if timestamp is None else timestamp)),
            "type": kind,
            kind: content,
        }
        return self.notification(
            {"contacts": [{"profile": {"name": name}, "wa_id": sender}], "messages": [message]}
        )

    def text_notification(self, sender: str, text: str, **options: Any) -> bytes:
        return self.message_notification(sender, "text", {"body": text}, **options)

    def tap_notification(self, sender: str, held_wamid: str, reply_id: str, title: str) -> bytes:
        """The user taps a reply button (or list row) of the bot's message `held_wamid`."""
        held = next(m for m in self.sent if m.wamid == held_wamid)
        kind = "list_reply" if held.content.get("type") == "list" else "button_reply"
        body = self.message_notification(
            sender, "interactive", {"type": kind, kind: {"id": reply_id, "title": title}}
        )
        payload = json.loads(body)
        message = payload["entry"][0]["changes"][0]["value"]["messages"][0]
        message["context"] = {"from": "15550000000", "id": held_wamid}
        return json.dumps(payload).encode()

    def reaction_notification(
        self, sender: str, reacted_wamid: str, emoji: str, *, wamid: str | None = None
    ) -> bytes:
        """The user reacts with `emoji` to the bot's message `reacted_wamid`; an empty `emoji`
        takes their reaction back (sent without the field)."""
        reaction = {"message_id": reacted_wamid}
        if emoji:
            reaction["emoji"] = emoji
        return self.message_notification(sender, "reaction", reaction, wamid=wamid)

    def status_notification(self, wamid: str, recipient: str, status: str = "delivered") -> bytes:
        update = {
            "id": wamid,
            "status": status,
            "timestamp": str(int(time.time())),
            "recipient_id": recipient,
        }
        return self.notification({"statuses": [update]})

    def signed_headers(self, body: bytes, *, app_secret: str | None = None) -> dict[str, str]:
        return {"X-Hub-Signature-256": hub_signature(app_secret or self.app_secret, body)}

    # The Graph API

    def _authorised(self, request: web.Request) -> bool:
        expected = f"Bearer {self.access_token}"
        return hmac.compare_digest(request.headers.get("Authorization", ""), expected)

    def _error(self, code: int, status: int = 400, details: str = "") -> web.Response:
        error: JsonObject = {
            "message": _ERROR_MESSAGES.get(code, "Error"),
            "type": "OAuthException",
            "code": code,
            "error_data": {"messaging_product": "whatsapp", "details": details or "scripted"},
            "fbtrace_id": "AbCdEfGh",
        }
        return web.json_response({"error": error}, status=401 if code == 190 else status)

    async def _phone_number(self, request: web.Request) -> web.Response:
        if self.hold_lookups:
            await self.control.hold()
        if not self._authorised(request):
            return self._error(190)
        return web.json_response(
            {
                "verified_name": "Fake Business",
                "display_phone_number": self.display_number,
                "id": self.phone_number_id,
            }
        )

    async def _messages(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._error(190)
        body = await request.json()
        if body.get("status") == "read":
            typing = body.get("typing_indicator") == {"type": "text"}
            self.reads.append(ReadReceipt(str(body.get("message_id")), typing, self._clock()))
            await self._changes.notify()
            return web.json_response({"success": True})
        answer = self._refusal(body)
        if answer is not None:
            code = json.loads(answer.text or "{}")["error"]["code"]
            self.send_results.append((answer.status, code))
            await self._changes.notify()
            return answer
        wamid = self.new_wamid()
        to, kind = str(body["to"]), str(body["type"])
        self.sent.append(SentMessage(wamid, to, kind, dict(body[kind]), self._clock()))
        self.send_results.append((200, None))
        await self._changes.notify()
        return web.json_response(
            {
                "messaging_product": "whatsapp",
                "contacts": [{"input": to, "wa_id": to}],
                "messages": [{"id": wamid}],
            }
        )

    def _refusal(self, body: JsonObject) -> web.Response | None:
        if self._failures:
            return self._error(self._failures.pop(0))
        if body.get("messaging_product") != "whatsapp" or not str(body.get("to", "")).isdigit():
            return self._error(100, details="Parameter 'to' is not a valid WhatsApp id")
        kind = body.get("type")
        if not isinstance(kind, str) or not isinstance(body.get(kind), dict):
            return self._error(100, details="Missing message content")
        if kind == "text" and len(str(body["text"].get("body", ""))) > MAX_TEXT_CHARS:
            return self._error(100, details="Param text['body'] must be at most 4096 characters")
        if kind == "reaction":
            reaction = body["reaction"]
            if not reaction.get("message_id") or not isinstance(reaction.get("emoji"), str):
                return self._error(100, details="a reaction needs message_id and emoji")
        if kind == "interactive":
            problem = _interactive_problem(body["interactive"])
            if problem is not None:
                return self._error(100, details=problem)
        return None

    async def _upload(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._error(190)
        form = await request.post()
        upload = form.get("file")
        if form.get("messaging_product") != "whatsapp" or not isinstance(upload, web.FileField):
            return self._error(100, details="an upload needs messaging_product and file")
        media_id = str(next(self._ids) + 800_000_000)
        self.uploads[media_id] = (upload.file.read(), upload.filename, str(form.get("type")))
        return web.json_response({"id": media_id})

    async def _media_url(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._error(190)
        media_id = request.match_info["media_id"]
        if media_id not in self.media:
            return self._error(100, details="Unsupported get request")
        data, mime_type = self.media[media_id]
        return web.json_response(
            {
                "messaging_product": "whatsapp",
                "url": f"{self.origin}/download/{media_id}",
                "mime_type": mime_type,
                "sha256": hashlib.sha256(data).hexdigest(),
                "file_size": len(data),
                "id": media_id,
            }
        )

    async def _download(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.Response(status=401)
        media_id = request.match_info["media_id"]
        self.media_downloads.append(media_id)
        data, mime_type = self.media[media_id]
        if media_id in self.corrupt_media:
            data = data[::-1]
        return web.Response(body=data, content_type=mime_type)


def _interactive_problem(shown: JsonObject) -> str | None:
    """What Meta would refuse in an `interactive` object, or None."""
    body = shown.get("body")
    text = body.get("text") if isinstance(body, dict) else None
    if not isinstance(text, str) or not 1 <= len(text) <= 1024:
        return "Param interactive['body']['text'] must be 1-1024 characters"
    action = shown.get("action")
    if not isinstance(action, dict):
        return "Param interactive['action'] is required"
    if shown.get("type") == "button":
        buttons = action.get("buttons")
        if not isinstance(buttons, list) or not 1 <= len(buttons) <= 3:
            return "Param interactive['action']['buttons'] must have 1-3 buttons"
        choices = [(b["reply"]["id"], b["reply"]["title"], 20) for b in buttons]
    elif shown.get("type") == "list":
        label = action.get("button")
        if not isinstance(label, str) or not 1 <= len(label) <= 20:
            return "Param interactive['action']['button'] must be 1-20 characters"
        rows = [row for section in action.get("sections", []) for row in section["rows"]]
        if not 1 <= len(rows) <= 10:
            return "Param interactive['action']['sections'] must have 1-10 rows in all"
        choices = [(row["id"], row["title"], 24) for row in rows]
    else:
        return "Param interactive['type'] is not supported"
    for reply_id, title, max_title in choices:
        if not isinstance(reply_id, str) or not 1 <= len(reply_id) <= 256:
            return "a reply id must be 1-256 characters"
        if not isinstance(title, str) or not 1 <= len(title) <= max_title:
            return f"a title must be 1-{max_title} characters"
    return None
