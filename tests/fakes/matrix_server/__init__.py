"""A fake Matrix homeserver on 127.0.0.1: the client-server API subset the Matrix channel uses.

matrix-nio runs against it unchanged; only the far end is ours.

    async with FakeMatrix() as fake:
        room = fake.create_room([ALICE])           # a direct chat: Alice and the bot
        fake.say(room, ALICE, "hi")
        await fake.wait_until(lambda: fake.shown(room))

Endpoints (under `/_matrix/client/v3`, `Authorization: Bearer <token>`): `GET account/whoami`,
`GET sync` (long polling: held until an event arrives or `timeout` ms pass; `since` tokens are
`s<position>`), `PUT rooms/{room}/send/{type}/{txnId}` (idempotent per token and txnId: the same
txnId returns the first event id and stores nothing new), `PUT rooms/{room}/redact/{event}/{txnId}`
(an `m.room.redaction` of the event), `PUT rooms/{room}/typing/{user}`,
`POST join/{room}`. Errors have the spec's shape `{"errcode", "error"}`; a rate limit is 429
`M_LIMIT_EXCEEDED` with `retry_after_ms`; an event over 65,536 bytes (canonical JSON) is 413
`M_TOO_LARGE`; a bad token is 401 `M_UNKNOWN_TOKEN`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes import ServedFake
from tests.fakes.matrix_server.world import SERVER, JsonObject, MatrixWorld

__all__ = ["MAX_EVENT_BYTES", "SERVER", "FakeMatrix", "RecordedCall", "canonical_size"]

PREFIX = "/_matrix/client/v3"
MAX_EVENT_BYTES = 65_536


def canonical_size(event: JsonObject) -> int:
    text = json.dumps(event, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return len(text.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class RecordedCall:
    method: str
    path: str
    body: JsonObject
    status: int
    at: float


@dataclass
class _Failure:
    kind: str
    status: int
    body: JsonObject
    remaining: int


class FakeMatrix(MatrixWorld, ServedFake):
    def __init__(
        self,
        *,
        bot_user_id: str = f"@octos:{SERVER}",
        access_token: str = "fake-matrix-access-token",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(bot_user_id)
        self.access_token = access_token
        self.device_id = "FAKEDEVICE"
        self._clock = clock
        self.calls: list[RecordedCall] = []
        self.typing: list[tuple[str, bool]] = []
        self.joins: list[str] = []
        self.event_sizes: list[int] = []
        self.long_polls_waiting = 0
        self.syncs = 0
        self._txns: dict[str, str] = {}
        self._failures: list[_Failure] = []
        self.downloads: list[str] = []
        #: Each upload to the media repository: (filename, content type, bytes).
        self.uploads: list[tuple[str, str, bytes]] = []
        ServedFake.__init__(self, self._app())

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_get(f"{PREFIX}/account/whoami", self._whoami)
        app.router.add_get(f"{PREFIX}/sync", self._sync)
        app.router.add_get(f"{PREFIX}/rooms/{{room}}/messages", self._messages)
        app.router.add_put(f"{PREFIX}/rooms/{{room}}/send/{{type}}/{{txn}}", self._send)
        app.router.add_put(f"{PREFIX}/rooms/{{room}}/redact/{{event}}/{{txn}}", self._redact)
        app.router.add_put(f"{PREFIX}/rooms/{{room}}/typing/{{user}}", self._typing)
        app.router.add_post(f"{PREFIX}/join/{{room}}", self._join)
        app.router.add_post("/_matrix/media/v3/upload", self._upload)
        app.router.add_get("/_matrix/client/v1/media/download/{server}/{media_id}", self._download)
        app.router.add_get(
            "/_matrix/client/v1/media/download/{server}/{media_id}/{name}", self._download
        )
        return app

    @property
    def homeserver(self) -> str:
        return self.origin

    def calls_to(self, method: str, fragment: str) -> list[RecordedCall]:
        return [c for c in self.calls if c.method == method and fragment in c.path]

    # Failures

    def fail_next(self, kind: str, status: int, errcode: str, error: str, **extra: Any) -> None:
        """`kind` is "send", "redact", "sync", "messages", "typing" or "join"."""
        self._failures.append(
            _Failure(kind, status, {"errcode": errcode, "error": error, **extra}, 1)
        )

    def rate_limit_next(self, kind: str, *, retry_after_ms: int = 1000) -> None:
        self.fail_next(
            kind, 429, "M_LIMIT_EXCEEDED", "Too Many Requests", retry_after_ms=retry_after_ms
        )

    # Handlers

    async def _answer(
        self,
        request: web.Request,
        kind: str,
        handler: Callable[[JsonObject], tuple[int, JsonObject]],
    ) -> web.Response:
        body: JsonObject = {}
        if request.can_read_body:
            try:
                body = await request.json()
            except ValueError:
                return await self._done(request, body, 400, _error("M_NOT_JSON", "not JSON"))
        if request.headers.get("Authorization") != f"Bearer {self.access_token}":
            return await self._done(
                request, body, 401, _error("M_UNKNOWN_TOKEN", "Invalid access token passed.")
            )
        for failure in self._failures:
            if failure.remaining > 0 and failure.kind == kind:
                failure.remaining -= 1
                return await self._done(request, body, failure.status, failure.body)
        status, answer = handler(body)
        return await self._done(request, body, status, answer)

    async def _done(
        self, request: web.Request, body: JsonObject, status: int, answer: JsonObject
    ) -> web.Response:
        self.calls.append(RecordedCall(request.method, request.path, body, status, self._clock()))
        self._notify()
        return web.json_response(answer, status=status)

    async def _whoami(self, request: web.Request) -> web.Response:
        return await self._answer(
            request,
            "whoami",
            lambda _b: (
                200,
                {"user_id": self.bot_user_id, "device_id": self.device_id, "is_guest": False},
            ),
        )

    async def _send(self, request: web.Request) -> web.Response:
        room_id = request.match_info["room"]
        event_type = request.match_info["type"]
        txn = request.match_info["txn"]

        def handle(content: JsonObject) -> tuple[int, JsonObject]:
            room = self._rooms.get(room_id)
            if room is None or room.members.get(self.bot_user_id) != "join":
                return 403, _error("M_FORBIDDEN", "You are not in this room.")
            if txn in self._txns:
                return 200, {"event_id": self._txns[txn]}
            event = self._event(room_id, self.bot_user_id, event_type, content)
            size = canonical_size(event)
            if size > MAX_EVENT_BYTES:
                return 413, _error("M_TOO_LARGE", f"event too large: {size} bytes")
            self.event_sizes.append(size)
            self._txns[txn] = str(event["event_id"])
            self._append(room_id, event)
            return 200, {"event_id": event["event_id"]}

        return await self._answer(request, "send", handle)

    async def _redact(self, request: web.Request) -> web.Response:
        room_id = request.match_info["room"]
        redacted = request.match_info["event"]
        txn = request.match_info["txn"]

        def handle(body: JsonObject) -> tuple[int, JsonObject]:
            room = self._rooms.get(room_id)
            if room is None or room.members.get(self.bot_user_id) != "join":
                return 403, _error("M_FORBIDDEN", "You are not in this room.")
            if txn in self._txns:
                return 200, {"event_id": self._txns[txn]}
            event = self._event(room_id, self.bot_user_id, "m.room.redaction", body)
            event["redacts"] = redacted
            self._txns[txn] = str(event["event_id"])
            self._append(room_id, event)
            return 200, {"event_id": event["event_id"]}

        return await self._answer(request, "redact", handle)

    async def _typing(self, request: web.Request) -> web.Response:
        room_id = request.match_info["room"]

        def handle(body: JsonObject) -> tuple[int, JsonObject]:
            self.typing.append((room_id, bool(body.get("typing"))))
            return 200, {}

        return await self._answer(request, "typing", handle)

    async def _join(self, request: web.Request) -> web.Response:
        room_id = request.match_info["room"]

        def handle(_body: JsonObject) -> tuple[int, JsonObject]:
            room = self._rooms.get(room_id)
            if room is None or self.bot_user_id not in room.members:
                return 403, _error("M_FORBIDDEN", "You are not invited to this room.")
            room.members[self.bot_user_id] = "join"
            self.joins.append(room_id)
            self._append(
                room_id, self._member_event(room_id, self.bot_user_id, "join", self.bot_user_id)
            )
            return 200, {"room_id": room_id}

        return await self._answer(request, "join", handle)

    async def _upload(self, request: web.Request) -> web.Response:
        """The media repository's upload: the body is the file, its type the Content-Type."""
        # The legacy media API also takes the token as a query parameter (as nio sends it).
        by_query = request.query.get("access_token") == self.access_token
        if not (self._authorised(request) or by_query):
            return web.json_response(_error("M_UNKNOWN_TOKEN", "Invalid access token"), status=401)
        data = await request.read()
        media_id = f"media{next(self._ids)}"
        self.media[media_id] = (data, request.content_type)
        self.uploads.append((request.query.get("filename", ""), request.content_type, data))
        self._notify()
        return web.json_response({"content_uri": f"mxc://{SERVER}/{media_id}"})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        media_id = request.match_info["media_id"]
        self.downloads.append(media_id)
        self._notify()
        if not self._authorised(request):
            return web.json_response(_error("M_UNKNOWN_TOKEN", "Invalid access token"), status=401)
        found = self.media.get(media_id)
        if found is None:
            return web.json_response(_error("M_NOT_FOUND", "Not found"), status=404)
        return web.Response(body=found[0], content_type=found[1])

    async def _sync(self, request: web.Request) -> web.Response:
        since_text = request.query.get("since", "")
        since = int(since_text[1:]) if since_text.startswith("s") else 0
        timeout_s = min(int(request.query.get("timeout", "0") or 0), 60_000) / 1000
        self.syncs += 1
        if timeout_s and self._position() <= since and self._authorised(request):
            self.long_polls_waiting += 1
            self._notify()
            try:
                await asyncio.wait_for(self._wait_for(lambda: self._position() > since), timeout_s)
            except TimeoutError:
                pass  # a long poll that saw nothing new answers the empty sync, as Synapse does
            finally:
                self.long_polls_waiting -= 1
        limit = _timeline_limit(request.query.get("filter"))
        return await self._answer(request, "sync", lambda _b: (200, self._sync_body(since, limit)))

    async def _messages(self, request: web.Request) -> web.Response:
        start = _position(request.query.get("from", ""), self._position())
        end = _position(request.query.get("to", ""), 0)
        limit = int(request.query.get("limit", "10"))
        room_id = request.match_info["room"]
        return await self._answer(
            request, "messages", lambda _b: (200, self._messages_body(room_id, start, end, limit))
        )

    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.access_token}"


def _position(token: str, default: int) -> int:
    return int(token[1:]) if token.startswith("s") else default


def _timeline_limit(sync_filter: str | None) -> int | None:
    """The `room.timeline.limit` of an inline JSON filter, as matrix-nio sends it."""
    if not sync_filter or not sync_filter.startswith("{"):
        return None
    limit = json.loads(sync_filter).get("room", {}).get("timeline", {}).get("limit")
    return int(limit) if isinstance(limit, int) else None


def _error(errcode: str, error: str) -> JsonObject:
    return {"errcode": errcode, "error": error}
