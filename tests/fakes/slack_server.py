"""A fake Slack on 127.0.0.1: the Web API subset slack_sdk uses, Socket Mode, files, signatures.

The real slack-bolt and slack_sdk run against it unchanged; only the far end is ours.

    async with FakeSlack() as fake:
        channel = SlackChannel(bot_token=fake.bot_token, app_token=fake.app_token,
                               base_url=fake.base_url, data_dir=...)
        ...
        await fake.wait_connected()
        post = fake.user_message("D1", "U1", "hi", channel_type="im")
        event_id, envelope_id = await fake.push_event(post)
        await fake.wait_until(lambda: fake.acked(envelope_id))
        await fake.wait_until(lambda: fake.bot_messages("D1"))

Web API (`{base_url}<method>`, form, query or JSON bodies, `Authorization: Bearer`): auth.test,
apps.connections.open (app token), chat.postMessage, chat.update, chat.delete (messages keep
their Block Kit `blocks`), reactions.add, reactions.remove, files.getUploadURLExternal,
files.completeUploadExternal; uploads go to `/upload/v1/<file id>` and files users share are
served (bot token only) from `/files-pri/...`. Answers have Slack's
shapes: HTTP 200 with `{"ok": true, ...}` or `{"ok": false, "error": "..."}`; a rate limit is
HTTP 429 with `Retry-After` in seconds.

Socket Mode (`/socket-mode?ticket=...`, a ticket from apps.connections.open, used once): `hello`
first, then the `events_api` envelopes a test pushes, and `interactive` ones (`block_actions`
of a button tap, `tap_payload`); the client's acks are recorded, with when they came.

Every API call is recorded (`requests`, `calls`), timestamped by an injectable clock. Failures:
`fail_next`, `rate_limit_next`, `server_error_next`; `drop_connections` cuts the websocket
without a close frame, `close_connections` closes it, `send_disconnect` asks the client to
reconnect, `socket_available` refuses new connections, `push_raw` sends anything at all.
`sign(body)` gives the headers of a correctly signed HTTP-mode request.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import itertools
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes import ServedFake
from tests.fakes.changes import Changes

JsonObject = dict[str, Any]
Answer = tuple[int, JsonObject, dict[str, str]]

#: Slack truncates `text` past 40,000 characters; its API refuses longer with msg_too_long.
MAX_TEXT_CHARS = 40_000


def sign_request(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack sends with an HTTP-mode request: a v0 HMAC-SHA256 signature."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + stamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/json",
    }


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    params: JsonObject
    headers: dict[str, str]
    status: int
    error: str | None
    at: float


@dataclass
class _Failure:
    method: str
    status: int
    body: JsonObject
    headers: dict[str, str]
    remaining: int


@dataclass
class _Staged:
    name: str
    length: int
    data: bytes | None = None


@dataclass
class _Socket:
    ws: web.WebSocketResponse
    request: web.Request
    frames: list[JsonObject] = field(default_factory=list)


class FakeSlack(ServedFake):
    def __init__(
        self,
        *,
        bot_token: str = "xoxb-1-fake-bot-token",
        app_token: str = "xapp-1-fake-app-token",
        signing_secret: str = "fake-signing-secret",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.signing_secret = signing_secret
        self.bot_user_id = "UBOT000001"
        self.bot_id = "BBOT000001"
        self.team_id = "TFAKE00001"
        self.app_id = "AFAKE00001"
        self._clock = clock
        self.requests: list[RecordedRequest] = []
        self.messages: dict[str, list[JsonObject]] = {}
        self.files: dict[str, JsonObject] = {}
        #: The ids of the shared files fetched, in order.
        self.downloaded: list[str] = []
        self.envelopes: list[JsonObject] = []
        self.acks: list[str] = []
        #: envelope id -> when its ack came (by the fake's clock, as `RecordedRequest.at`).
        self.acked_at: dict[str, float] = {}
        #: (channel, ts) -> the names of the bot's reactions on that message, in order.
        self.reactions: dict[tuple[str, str], list[str]] = {}
        self.socket_available = True
        self.connections_opened = 0
        self._sockets: list[_Socket] = []
        self._failures: list[_Failure] = []
        self._tickets: set[str] = set()
        self._staged: dict[str, _Staged] = {}
        self._hosted: dict[str, tuple[bytes, str]] = {}
        self._ids = itertools.count(1)
        self._last_ts = time.time()
        self._changes = Changes()
        ServedFake.__init__(self, self._application())

    def _application(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/v1/{file_id}", self._upload)
        app.router.add_get("/files-pri/{key}/{name}", self._download)
        app.router.add_get("/socket-mode", self._socket)
        return app

    async def _before_shutdown(self) -> None:
        await self.close_connections()

    @property
    def base_url(self) -> str:
        return f"{self.origin}/api/"

    # What happened

    def calls(self, method: str) -> list[RecordedRequest]:
        return [request for request in self.requests if request.method == method]

    def bot_messages(self, channel: str) -> list[JsonObject]:
        """What the bot posted in a channel (and has not deleted), oldest first."""
        return [m for m in self.messages.get(channel, []) if m.get("bot_id") == self.bot_id]

    def message(self, channel: str, ts: str) -> JsonObject | None:
        return next((m for m in self.messages.get(channel, []) if m["ts"] == ts), None)

    @property
    def open_connections(self) -> int:
        return len(self._sockets)

    def acked(self, envelope_id: str) -> bool:
        return envelope_id in self.acks

    # Waiting

    async def wait_until(self, predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
        """Wait until `predicate()` is true; it is checked after every change the fake sees."""
        await self._changes.wait_until(predicate, timeout_s)

    async def wait_connected(self, count: int = 1, timeout_s: float = 10.0) -> None:
        """Wait until `count` connections were opened in all and one is open now."""
        await self.wait_until(lambda: self.connections_opened >= count and self._sockets, timeout_s)

    # The world

    def next_ts(self) -> str:
        """A message timestamp, as Slack makes them: seconds.microseconds, strictly growing."""
        self._last_ts = max(time.time(), self._last_ts + 0.000001)
        return f"{self._last_ts:.6f}"

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):08d}"

    def user_message(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        channel_type: str = "channel",
        thread_ts: str | None = None,
        files: list[JsonObject] | None = None,
        event_type: str = "message",
    ) -> JsonObject:
        """A user posts: the message is stored, and its event (not yet sent) returned."""
        event: JsonObject = {
            "type": event_type,
            "user": user,
            "text": text,
            "ts": self.next_ts(),
            "channel": channel,
            "team": self.team_id,
            "event_ts": "",
        }
        event["event_ts"] = event["ts"]
        if event_type == "message":
            event["channel_type"] = channel_type
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        if files:
            event["files"] = files
            event["subtype"] = "file_share"
        self.messages.setdefault(channel, []).append(dict(event))
        return event

    def deletion_of(self, message_event: JsonObject) -> JsonObject:
        """The `message_deleted` event Slack sends when the user deletes `message_event`."""
        return {
            "type": "message",
            "subtype": "message_deleted",
            "channel": message_event["channel"],
            "channel_type": message_event.get("channel_type", "channel"),
            "hidden": True,
            "deleted_ts": message_event["ts"],
            "ts": self.next_ts(),
            "event_ts": self.next_ts(),
            "previous_message": {
                "type": "message",
                "user": message_event["user"],
                "text": message_event["text"],
            },
        }

    def mention_of(self, message_event: JsonObject) -> JsonObject:
        """The `app_mention` event Slack sends beside `message` for a post naming the bot."""
        event = {k: v for k, v in message_event.items() if k not in ("channel_type", "subtype")}
        event["type"] = "app_mention"
        return event

    def host_file(self, name: str, data: bytes, mimetype: str = "text/plain") -> JsonObject:
        """A file a user shares: served to the bot token only, as a Slack file object."""
        file_id = self.new_id("F")
        self._hosted[file_id] = (data, mimetype)
        url = f"{self.origin}/files-pri/{self.team_id}-{file_id}/{name}"
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "size": len(data),
            "url_private": url,
            "url_private_download": f"{url}?download=1",
        }

    def sign(self, body: bytes, timestamp: int | None = None) -> dict[str, str]:
        """Headers of an HTTP-mode request signed with this app's signing secret."""
        return sign_request(self.signing_secret, body, timestamp)

    def event_callback(self, event: JsonObject, *, event_id: str | None = None) -> JsonObject:
        """The Events API body around `event`, as both Socket Mode and HTTP mode carry it."""
        return {
            "token": "fake-verification-token",
            "team_id": self.team_id,
            "api_app_id": self.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or self.new_id("Ev"),
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": "4-fake-context",
        }

    # Socket Mode: pushing

    async def push_event(
        self,
        event: JsonObject,
        *,
        event_id: str | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
    ) -> tuple[str, str]:
        """Send an `events_api` envelope on the newest connection: (event_id, envelope_id)."""
        payload = self.event_callback(event, event_id=event_id)
        envelope: JsonObject = {
            "envelope_id": str(uuid.uuid4()),
            "type": "events_api",
            "payload": payload,
            "accepts_response_payload": False,
            "retry_attempt": retry_attempt,
            "retry_reason": retry_reason,
        }
        await self.push_envelope(envelope)
        return payload["event_id"], envelope["envelope_id"]

    def buttons_of(self, channel: str, ts: str) -> list[JsonObject]:
        """The buttons of a message's `actions` blocks, in order."""
        message = self.message(channel, ts) or {}
        return [
            element
            for block in message.get("blocks") or []
            if block.get("type") == "actions"
            for element in block.get("elements", [])
        ]

    def tap_payload(
        self,
        channel: str,
        ts: str,
        value: str,
        user: str,
        *,
        action_ts: str | None = None,
        as_shown: JsonObject | None = None,
    ) -> JsonObject:
        """The `block_actions` payload of `user` tapping the button holding `value` under the
        bot's message `ts`, as the message is now (or `as_shown`: an app still showing it)."""
        message = copy.deepcopy(as_shown or self.message(channel, ts) or {})
        buttons = [
            element
            for block in message.get("blocks") or []
            if block.get("type") == "actions"
            for element in block.get("elements", [])
            if element.get("value") == value
        ]
        button: JsonObject = (
            buttons[0] if buttons else {"action_id": "forged", "text": {"text": value}}
        )
        return {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "team_id": self.team_id},
            "api_app_id": self.app_id,
            "token": "fake-verification-token",
            "container": {
                "type": "message",
                "message_ts": ts,
                "channel_id": channel,
                "is_ephemeral": False,
            },
            "trigger_id": f"{next(self._ids)}.fake-trigger",
            "team": {"id": self.team_id, "domain": "octos-test"},
            "channel": {"id": channel, "name": "directmessage"},
            "message": message,
            "response_url": f"{self.origin}/actions/{channel}/{ts}",
            "actions": [
                {
                    "action_id": button.get("action_id"),
                    "block_id": "fake-block",
                    "text": {"type": "plain_text", "text": button.get("text", {}).get("text")},
                    "value": value,
                    "type": "button",
                    "action_ts": action_ts or self.next_ts(),
                }
            ],
        }

    async def push_interactive(self, payload: JsonObject) -> str:
        """Send an `interactive` envelope (a button tap) on the newest connection; its id."""
        envelope: JsonObject = {
            "envelope_id": str(uuid.uuid4()),
            "type": "interactive",
            "payload": payload,
            "accepts_response_payload": False,
        }
        await self.push_envelope(envelope)
        return str(envelope["envelope_id"])

    async def push_envelope(self, envelope: JsonObject) -> None:
        self.envelopes.append(envelope)
        await self.push_raw(json.dumps(envelope))

    async def push_raw(self, text: str) -> None:
        """Any frame at all (broken JSON, a wrong shape) on the newest connection."""
        if not self._sockets:
            raise RuntimeError("no Socket Mode connection: await fake.wait_connected() first")
        await self._sockets[-1].ws.send_str(text)

    async def send_disconnect(self, reason: str = "refresh_requested") -> None:
        """Slack's request to reconnect (it sends one before it restarts a server)."""
        await self.push_raw(json.dumps({"type": "disconnect", "reason": reason}))

    async def drop_connections(self) -> None:
        """Cut every websocket without a close frame, as a network failure does."""
        for socket in list(self._sockets):
            transport = socket.request.transport
            if transport is not None:
                transport.abort()

    async def close_connections(self, code: int = 1001) -> None:
        for socket in list(self._sockets):
            await socket.ws.close(code=code)

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if not self.socket_available:
            return web.Response(status=503, text="socket mode unavailable")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        self._tickets.discard(ticket)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        socket = _Socket(ws, request)
        self._sockets.append(socket)
        self.connections_opened += 1
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self._sockets),
                "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
                "connection_info": {"app_id": self.app_id},
            }
        )
        await self._changes.notify()
        try:
            async for frame in ws:
                if frame.type == WSMsgType.TEXT:
                    await self._client_frame(socket, frame.data)
        finally:
            self._sockets.remove(socket)
            await self._changes.notify()
        return ws

    async def _client_frame(self, socket: _Socket, data: str) -> None:
        try:
            frame = json.loads(data)
        except ValueError:
            frame = {"unparsed": data}
        socket.frames.append(frame)
        if isinstance(frame, dict) and isinstance(frame.get("envelope_id"), str):
            self.acks.append(frame["envelope_id"])
            self.acked_at.setdefault(frame["envelope_id"], self._clock())
        await self._changes.notify()

    # Failures

    def fail_next(
        self,
        method: str,
        error: str = "internal_error",
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """The next `times` calls of a Web API method get `{"ok": false, "error": error}`."""
        body = {"ok": False, "error": error}
        self._failures.append(_Failure(method, status, body, dict(headers or {}), times))

    def rate_limit_next(self, method: str, *, retry_after_s: int = 1, times: int = 1) -> None:
        self.fail_next(
            method,
            "ratelimited",
            status=429,
            headers={"Retry-After": str(retry_after_s)},
            times=times,
        )

    def server_error_next(self, method: str, *, status: int = 503, times: int = 1) -> None:
        self.fail_next(method, "service_unavailable", status=status, times=times)

    # The Web API

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _read_params(request)
        status, body, headers = self._injected(method) or self._answer(method, request, params)
        self.requests.append(
            RecordedRequest(
                method=method,
                params=params,
                headers=dict(request.headers),
                status=status,
                error=None if body.get("ok") else str(body.get("error")),
                at=self._clock(),
            )
        )
        await self._changes.notify()
        if status >= 500:
            return web.Response(status=status, text="upstream trouble", headers=headers)
        return web.json_response(body, status=status, headers=headers)

    def _injected(self, method: str) -> Answer | None:
        for failure in self._failures:
            if failure.remaining > 0 and failure.method == method:
                failure.remaining -= 1
                return failure.status, failure.body, failure.headers
        return None

    def _answer(self, method: str, request: web.Request, params: JsonObject) -> Answer:
        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        token = _bearer(request) or str(params.pop("token", ""))
        if not token:
            return _error("not_authed")
        if token != expected:
            return _error("invalid_auth")
        handler = {
            "auth.test": self._auth_test,
            "apps.connections.open": self._connections_open,
            "chat.postMessage": self._post_message,
            "chat.update": self._update_message,
            "chat.delete": self._delete_message,
            "reactions.add": self._add_reaction,
            "reactions.remove": self._remove_reaction,
            "files.getUploadURLExternal": self._upload_url,
            "files.completeUploadExternal": self._complete_upload,
        }.get(method)
        if handler is None:
            return _error("unknown_method")
        return handler(params)

    def _auth_test(self, _params: JsonObject) -> Answer:
        return _ok(
            url="https://octos-test.slack.com/",
            team="Octos Test",
            user="octos",
            team_id=self.team_id,
            user_id=self.bot_user_id,
            bot_id=self.bot_id,
            is_enterprise_install=False,
        )

    def _connections_open(self, _params: JsonObject) -> Answer:
        ticket = str(uuid.uuid4())
        self._tickets.add(ticket)
        port = self._server.port
        return _ok(url=f"ws://127.0.0.1:{port}/socket-mode?ticket={ticket}&app_id={self.app_id}")

    def _post_message(self, params: JsonObject) -> Answer:
        channel, text = str(params.get("channel") or ""), str(params.get("text") or "")
        if not channel:
            return _error("channel_not_found")
        if not text.strip() and not params.get("blocks"):
            return _error("no_text")
        if len(text) > MAX_TEXT_CHARS:
            return _error("msg_too_long")
        message = self._bot_message(channel, text, params.get("thread_ts"))
        blocks = _blocks(params)
        if blocks:
            message["blocks"] = blocks
        return _ok(channel=channel, ts=message["ts"], message=message)

    def _bot_message(self, channel: str, text: str, thread_ts: object) -> JsonObject:
        message: JsonObject = {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "text": text,
            "ts": self.next_ts(),
            "team": self.team_id,
        }
        if thread_ts:
            message["thread_ts"] = str(thread_ts)
        self.messages.setdefault(channel, []).append(message)
        return message

    def _update_message(self, params: JsonObject) -> Answer:
        channel, ts = str(params.get("channel") or ""), str(params.get("ts") or "")
        text = str(params.get("text") or "")
        message = self.message(channel, ts)
        if message is None:
            return _error("message_not_found")
        if message.get("bot_id") != self.bot_id:
            return _error("cant_update_message")
        if len(text) > MAX_TEXT_CHARS:
            return _error("msg_too_long")
        message["text"] = text
        if "blocks" in params:
            # Slack replaces the message's blocks with the ones given (none: only the text).
            message["blocks"] = _blocks(params)
        message["edited"] = {"user": self.bot_user_id, "ts": self.next_ts()}
        return _ok(channel=channel, ts=ts, text=text, message=message)

    def _delete_message(self, params: JsonObject) -> Answer:
        channel, ts = str(params.get("channel") or ""), str(params.get("ts") or "")
        message = self.message(channel, ts)
        if message is None:
            return _error("message_not_found")
        self.messages[channel].remove(message)
        return _ok(channel=channel, ts=ts)

    def _add_reaction(self, params: JsonObject) -> Answer:
        key, name = self._reacted(params)
        if self.message(*key) is None:
            return _error("message_not_found")
        names = self.reactions.setdefault(key, [])
        if name in names:
            return _error("already_reacted")
        names.append(name)
        return _ok()

    def _remove_reaction(self, params: JsonObject) -> Answer:
        key, name = self._reacted(params)
        names = self.reactions.get(key, [])
        if name not in names:
            return _error("no_reaction")
        names.remove(name)
        return _ok()

    def _reacted(self, params: JsonObject) -> tuple[tuple[str, str], str]:
        channel, ts = str(params.get("channel") or ""), str(params.get("timestamp") or "")
        return (channel, ts), str(params.get("name") or "")

    def _upload_url(self, params: JsonObject) -> Answer:
        name = str(params.get("filename") or "")
        try:
            length = int(str(params.get("length")))
        except ValueError:
            return _error("invalid_arguments")
        if not name or length < 0:
            return _error("invalid_arguments")
        file_id = self.new_id("F")
        self._staged[file_id] = _Staged(name, length)
        return _ok(upload_url=f"{self.origin}/upload/v1/{file_id}", file_id=file_id)

    async def _upload(self, request: web.Request) -> web.Response:
        staged = self._staged.get(request.match_info["file_id"])
        if staged is None:
            return web.Response(status=404, text="unknown upload")
        staged.data = await request.read()
        await self._changes.notify()
        return web.Response(text=f"OK - {len(staged.data)}", content_type="text/plain")

    def _complete_upload(self, params: JsonObject) -> Answer:
        raw = params.get("files")
        entries = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(entries, list) or not entries:
            return _error("invalid_arguments")
        done: list[JsonObject] = []
        for entry in entries:
            staged = self._staged.pop(str(entry.get("id")), None)
            if staged is None or staged.data is None or len(staged.data) != staged.length:
                return _error("file_not_found")
            file_object = {
                "id": entry["id"],
                "name": staged.name,
                "title": entry.get("title") or staged.name,
                "size": len(staged.data),
            }
            self.files[entry["id"]] = {**file_object, "data": staged.data}
            done.append(file_object)
        channel = params.get("channel_id")
        if channel:
            message = self._bot_message(
                str(channel), str(params.get("initial_comment") or ""), params.get("thread_ts")
            )
            message["files"] = done
        return _ok(files=done)

    async def _download(self, request: web.Request) -> web.Response:
        file_id = request.match_info["key"].rpartition("-")[2]
        self.downloaded.append(file_id)
        hosted = self._hosted.get(file_id)
        if hosted is None:
            return web.Response(status=404, text="no such file")
        if _bearer(request) != self.bot_token:
            # Slack answers a request without the token with its sign-in page.
            return web.Response(text="<html>Sign in to Slack</html>", content_type="text/html")
        data, mimetype = hosted
        return web.Response(body=data, content_type=mimetype)


def _ok(**fields: object) -> Answer:
    return 200, {"ok": True, **fields}, {}


def _error(code: str) -> Answer:
    return 200, {"ok": False, "error": code}, {}


def _bearer(request: web.Request) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token if scheme.lower() == "bearer" else ""


async def _read_params(request: web.Request) -> JsonObject:
    params: JsonObject = dict(request.query)
    if request.content_type == "application/json":
        body = await request.json()
        if isinstance(body, dict):
            params.update(body)
    elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.post()
        params.update({key: value for key, value in form.items() if isinstance(value, str)})
    return params


def _blocks(params: JsonObject) -> list[JsonObject]:
    """The `blocks` of a call: a list in a JSON body, a JSON string in a form."""
    raw = params.get("blocks")
    blocks = json.loads(raw) if isinstance(raw, str) else raw
    return list(blocks) if isinstance(blocks, list) else []
