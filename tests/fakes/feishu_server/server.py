"""A fake Feishu/Lark open platform on 127.0.0.1: the REST API the channel calls, the long
connection (protobuf frames over a websocket) and signed, encrypted webhook events.

    async with FakeFeishu() as fake:
        config = FeishuConfig(app_id=fake.app_id, app_secret=fake.app_secret,
                              base_url=fake.base_url, allow=[...])
        await fake.wait_connected()
        frame_id = await fake.push_event(fake.message_event("ou_alice", "oc_chat", "hi"))
        await fake.wait_until(lambda: fake.acked(frame_id))
        await fake.wait_until(lambda: fake.texts("oc_chat"))

REST (`{base_url}/open-apis/...`, JSON `{"code", "msg", ...}`, `Authorization: Bearer t-...`):
tenant_access_token/internal (10014 for a wrong secret), bot/v3/info, im/v1/messages (create:
`interactive` cards or `text`; a `uuid` already seen returns the first message again; bodies
over 30 KB get 230025), GET im/v1/messages/{id} (`data.items[0]`: a message the bot sent, its
sender the app, or a user's from an event built here, its sender the user; 230001 for any
other id) and PATCH im/v1/messages/{id} (only cards with `update_multi`; more than 5 updates a
second on one message get HTTP 429 with code 99991400 and `x-ogw-ratelimit-reset`, as does the
next send, GET or PATCH `rate_limit_next` names). A token from `expire_tokens` gets 99991663. GET
im/v1/messages/{id}/resources/{key}?type=image|file serves a file given with `add_resource`
(its bytes, with its Content-Type); an unknown one, or one `refuse_resources` names, gets
Feishu's JSON refusal (HTTP 400, code 234003). im/v1/images (multipart `image_type=message`,
`image`, at most 10 MB) and im/v1/files (`file_type`, `file_name`, `file`, at most 30 MB)
record the upload in `uploads` by the `image_key` or `file_key` they answer with; an empty or
larger file gets 234006. im/v1/messages/{id}/reactions creates a reaction of
`reaction_type.emoji_type` (231001 for a type that is not a name) and DELETE
.../reactions/{reaction_id} takes it back (231003 for an unknown one); the standing ones are in
`reactions`.

Long connection: `POST /callback/ws/endpoint {AppID, AppSecret}` returns the socket URL; pings
are answered with pongs carrying `ClientConfig`; `push_event` sends an event as one frame or as
`parts` frames; the client's acknowledgements are recorded by frame message id.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web

from channels.feishu import longconn
from channels.feishu.pbbp2_pb2 import Frame, Header
from channels.feishu.webhook import FeishuCipher
from tests.fakes import ServedFake
from tests.fakes.feishu_server.events import DOC_ENCRYPT_KEY, FeishuEventSender, JsonObject

MAX_BODY_BYTES = 30 * 1024
MAX_IMAGE_BYTES = 10 * 1024 * 1024
MAX_FILE_BYTES = 30 * 1024 * 1024
FILE_TYPES = frozenset({"opus", "mp4", "pdf", "doc", "xls", "ppt", "stream"})


@dataclass(frozen=True, slots=True)
class Upload:
    """A file uploaded for a message: its bytes, the name it was sent under, and its
    `file_type` (`image` for im/v1/images)."""

    data: bytes
    name: str
    file_type: str


UPDATES_PER_SECOND = 5


@dataclass
class FeishuMessage:
    message_id: str
    chat_id: str
    msg_type: str
    content: JsonObject
    updates: list[float] = field(default_factory=list)
    #: The text shown after the creation and after each update, in order.
    shown: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        if self.msg_type == "text":
            return str(self.content.get("text", ""))
        elements = self.content.get("elements") or []
        return "".join(str(e.get("content", "")) for e in elements if isinstance(e, dict))

    @property
    def buttons(self) -> list[list[JsonObject]]:
        """The card's buttons, a row per `action` element."""
        elements = self.content.get("elements") or []
        return [list(e["actions"]) for e in elements if e.get("tag") == "action"]

    @property
    def updatable(self) -> bool:
        return bool((self.content.get("config") or {}).get("update_multi"))


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    status: int
    code: int
    at: float
    body: JsonObject


class FakeFeishu(FeishuEventSender, ServedFake):
    def __init__(
        self,
        *,
        app_id: str = "cli_fake00000001",
        app_secret: str = "fake-feishu-app-secret",
        encrypt_key: str = DOC_ENCRYPT_KEY,
        verification_token: str = "fake-verification-token",
        ping_interval_s: int = 120,
    ) -> None:
        self.app_id = app_id
        self.app_secret = app_secret
        self.encrypt_key = encrypt_key
        self.verification_token = verification_token
        self.ping_interval_s = ping_interval_s
        self.bot_open_id = "ou_bot0000000000000001"
        self.cipher = FeishuCipher(encrypt_key)
        self.calls: list[Call] = []
        self.messages: dict[str, FeishuMessage] = {}
        self.user_messages: dict[str, JsonObject] = {}
        self.token_calls = 0
        self.pings = 0
        self.acks: dict[str, JsonObject] = {}
        self.connections_opened = 0
        self.handshakes_refused = 0
        self._refusal: tuple[str, str] | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self._tokens: set[str] = set()
        self._uuids: dict[str, str] = {}
        self._rate_limits: dict[str, int] = {}
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()
        self.resources: dict[tuple[str, str], tuple[str, bytes, str]] = {}
        self.refused_resources: set[str] = set()
        #: (message id, key, type) of each resource request, in order.
        self.resource_requests: list[tuple[str, str, str]] = []
        #: image_key or file_key -> what was uploaded under it.
        self.uploads: dict[str, Upload] = {}
        #: The bot's standing reactions: reaction id -> (message id, emoji type).
        self.reactions: dict[str, tuple[str, str]] = {}
        # Room for the largest upload; a message body's own limit is checked in `_create`.
        app = web.Application(client_max_size=MAX_FILE_BYTES + 1024 * 1024)
        app.router.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        app.router.add_get("/open-apis/bot/v3/info", self._bot_info)
        app.router.add_post("/open-apis/im/v1/messages", self._create)
        app.router.add_get("/open-apis/im/v1/messages/{message_id}", self._get_message)
        app.router.add_patch("/open-apis/im/v1/messages/{message_id}", self._patch)
        app.router.add_post("/open-apis/im/v1/messages/{message_id}/reactions", self._react)
        app.router.add_delete(
            "/open-apis/im/v1/messages/{message_id}/reactions/{reaction_id}", self._unreact
        )
        app.router.add_post("/open-apis/im/v1/images", self._upload_image)
        app.router.add_post("/open-apis/im/v1/files", self._upload_file)
        app.router.add_get("/open-apis/im/v1/messages/{message_id}/resources/{key}", self._resource)
        app.router.add_post("/callback/ws/endpoint", self._endpoint)
        app.router.add_get("/ws", self._socket)
        ServedFake.__init__(self, app)

    async def _before_shutdown(self) -> None:
        for ws in list(self._sockets):
            await ws.close()

    @property
    def base_url(self) -> str:
        return self.origin

    # REST

    def _answer(
        self, request: web.Request, body: JsonObject, status: int = 200, **headers: str
    ) -> web.Response:
        self.calls.append(
            Call(
                request.method,
                request.path,
                status,
                int(body.get("code", 0)),
                time.monotonic(),
                body,
            )
        )
        self._changed.set()
        return web.json_response(body, status=status, headers=headers)

    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("Authorization", "").removeprefix("Bearer ") in self._tokens

    def _invalid_token(self, request: web.Request) -> web.Response:
        body = {"code": 99991663, "msg": "Invalid access token for authorization."}
        return self._answer(request, body, status=400)

    async def _token(self, request: web.Request) -> web.Response:
        self.token_calls += 1
        body = await request.json()
        if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
            return self._answer(request, {"code": 10014, "msg": "app secret invalid"})
        token = "t-" + hashlib.sha256(f"{self.token_calls}{time.time()}".encode()).hexdigest()[:32]
        self._tokens.add(token)
        return self._answer(
            request, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200}
        )

    async def _bot_info(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._invalid_token(request)
        bot = {"activate_status": 2, "app_name": "Fake Bot", "open_id": self.bot_open_id}
        return self._answer(request, {"code": 0, "msg": "ok", "bot": bot})

    def _limited(self, request: web.Request, kind: str) -> web.Response | None:
        if self._rate_limits.get(kind, 0) <= 0:
            return None
        self._rate_limits[kind] -= 1
        body = {"code": 99991400, "msg": "request trigger frequency limit"}
        return self._answer(request, body, status=429, **{"x-ogw-ratelimit-reset": "1"})

    async def _create(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._invalid_token(request)
        raw = await request.read()
        body = json.loads(raw)
        if request.query.get("receive_id_type") != "chat_id":
            return self._answer(request, {"code": 99992402, "msg": "receive_id_type"}, status=400)
        if len(raw) > MAX_BODY_BYTES:
            return self._answer(request, {"code": 230025, "msg": "message too long"}, status=400)
        limited = self._limited(request, "send")
        if limited is not None:
            return limited
        chat_id = str(body.get("receive_id", ""))
        if not chat_id.startswith("oc_"):
            return self._answer(request, {"code": 230002, "msg": "bot not in chat"}, status=400)
        key = str(body.get("uuid") or "")
        if key and key in self._uuids:
            return self._answer(request, {"code": 0, "data": {"message_id": self._uuids[key]}})
        message_id = f"om_{next(self._ids):020d}"
        created = FeishuMessage(
            message_id, chat_id, str(body.get("msg_type")), json.loads(body["content"])
        )
        created.shown.append(created.text)
        self.messages[message_id] = created
        if key:
            self._uuids[key] = message_id
        return self._answer(
            request, {"code": 0, "msg": "success", "data": {"message_id": message_id}}
        )

    async def _get_message(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._invalid_token(request)
        limited = self._limited(request, "get")
        if limited is not None:
            return limited
        message_id = request.match_info["message_id"]
        sent, received = self.messages.get(message_id), self.user_messages.get(message_id)
        if sent is not None:
            sender = {"id": self.app_id, "id_type": "app_id", "sender_type": "app"}
            shown: JsonObject = {
                "chat_id": sent.chat_id,
                "msg_type": sent.msg_type,
                "sender": sender,
                "body": {"content": json.dumps(sent.content, ensure_ascii=False)},
            }
        elif received is not None:
            shown = {"msg_type": "text", **received}
        else:
            body = {"code": 230001, "msg": "Your request contains an invalid request parameter."}
            return self._answer(request, body, status=400)
        shown["sender"] = {**shown["sender"], "tenant_key": "tenant-fake"}
        item = {"message_id": message_id, "deleted": False, "updated": False, **shown}
        return self._answer(request, {"code": 0, "msg": "success", "data": {"items": [item]}})

    async def _react(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._invalid_token(request)
        body = await request.json()
        kind = str((body.get("reaction_type") or {}).get("emoji_type") or "")
        if not kind.replace("_", "").isalnum():
            return self._answer(request, {"code": 231001, "msg": "reaction type is invalid"}, 400)
        reaction_id = f"ZCaCIjUBVVWSrm5L-{next(self._ids):08d}"
        self.reactions[reaction_id] = (request.match_info["message_id"], kind)
        data = {"reaction_id": reaction_id, "reaction_type": {"emoji_type": kind}}
        return self._answer(request, {"code": 0, "msg": "success", "data": data})

    async def _unreact(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._invalid_token(request)
        reaction_id = request.match_info["reaction_id"]
        standing = self.reactions.get(reaction_id)
        if standing is None or standing[0] != request.match_info["message_id"]:
            return self._answer(request, {"code": 231003, "msg": "reaction not found"}, 400)
        del self.reactions[reaction_id]
        data = {"reaction_id": reaction_id, "reaction_type": {"emoji_type": standing[1]}}
        return self._answer(request, {"code": 0, "msg": "success", "data": data})

    async def _upload_image(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._invalid_token(request)
        form = await request.post()
        image = form.get("image")
        if form.get("image_type") != "message" or not isinstance(image, web.FileField):
            return self._answer(request, {"code": 234001, "msg": "invalid param"}, status=400)
        return self._uploaded(request, image, "image", MAX_IMAGE_BYTES, "image_key", "img_v2_")

    async def _upload_file(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._invalid_token(request)
        form = await request.post()
        file = form.get("file")
        file_type = str(form.get("file_type", ""))
        if file_type not in FILE_TYPES or not form.get("file_name"):
            return self._answer(request, {"code": 234001, "msg": "invalid param"}, status=400)
        if not isinstance(file, web.FileField):
            return self._answer(request, {"code": 234001, "msg": "invalid param"}, status=400)
        return self._uploaded(request, file, file_type, MAX_FILE_BYTES, "file_key", "file_v2_")

    def _uploaded(
        self,
        request: web.Request,
        field: web.FileField,
        file_type: str,
        max_bytes: int,
        key_name: str,
        prefix: str,
    ) -> web.Response:
        data = field.file.read()
        if not 0 < len(data) <= max_bytes:
            body = {"code": 234006, "msg": "file size exceeds the limit or is empty"}
            return self._answer(request, body, status=400)
        key = f"{prefix}{next(self._ids):012d}"
        self.uploads[key] = Upload(data, field.filename, file_type)
        return self._answer(request, {"code": 0, "msg": "success", "data": {key_name: key}})

    async def _patch(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._invalid_token(request)
        message = self.messages.get(request.match_info["message_id"])
        if message is None:
            return self._answer(request, {"code": 230011, "msg": "message not found"}, status=400)
        if not message.updatable:
            return self._answer(
                request, {"code": 230031, "msg": "card not update_multi"}, status=400
            )
        now = time.monotonic()
        recent = [at for at in message.updates if now - at < 1.0]
        limited = self._limited(request, "patch")
        if limited is not None:
            return limited
        if len(recent) >= UPDATES_PER_SECOND:
            body = {"code": 99991400, "msg": "too many updates of one message"}
            return self._answer(request, body, status=429, **{"x-ogw-ratelimit-reset": "1"})
        body = await request.json()
        message.content = json.loads(body["content"])
        message.updates.append(now)
        message.shown.append(message.text)
        return self._answer(request, {"code": 0, "msg": "success", "data": {}})

    def add_resource(
        self, event: JsonObject, key: str, data: bytes, content_type: str, resource_type: str
    ) -> None:
        """Serve `data` as the file `key` of `event`'s message, for `?type=resource_type`."""
        message_id = event["event"]["message"]["message_id"]
        self.resources[(message_id, key)] = (resource_type, data, content_type)

    async def _resource(self, request: web.Request) -> web.StreamResponse:
        if not self._authorised(request):
            return self._invalid_token(request)
        message_id, key = request.match_info["message_id"], request.match_info["key"]
        self.resource_requests.append((message_id, key, request.query.get("type", "")))
        found = self.resources.get((message_id, key))
        if found is None or key in self.refused_resources or found[0] != request.query.get("type"):
            body = {"code": 234003, "msg": "File not in msg."}
            return self._answer(request, body, status=400)
        _, data, content_type = found
        self._changed.set()
        return web.Response(body=data, content_type=content_type)

    def rate_limit_next(self, kind: str, count: int = 1) -> None:
        """`kind` is "send", "get" or "patch"."""
        self._rate_limits[kind] = self._rate_limits.get(kind, 0) + count

    def stop_rate_limiting(self) -> None:
        self._rate_limits.clear()

    def expire_tokens(self) -> None:
        self._tokens.clear()

    def chat_messages(self, chat_id: str) -> list[FeishuMessage]:
        return [m for m in self.messages.values() if m.chat_id == chat_id]

    def texts(self, chat_id: str) -> list[str]:
        return [m.text for m in self.chat_messages(chat_id)]

    def statuses(self, path_prefix: str) -> list[int]:
        return [c.status for c in self.calls if c.path.startswith(path_prefix)]

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    # The long connection

    async def _endpoint(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("AppID") != self.app_id or body.get("AppSecret") != self.app_secret:
            return self._answer(request, {"code": 514, "msg": "auth failed"})
        url = f"ws://127.0.0.1:{self._server.port}/ws?device_id=dev1&service_id=77"
        return self._answer(
            request, {"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": self._config()}}
        )

    def _config(self) -> JsonObject:
        return {
            "ReconnectCount": -1,
            "ReconnectInterval": 120,
            "ReconnectNonce": 30,
            "PingInterval": self.ping_interval_s,
        }

    def refuse_handshakes(self, status: str, message: str = "refused") -> None:
        """Refuse upgrades as Feishu does (`handshake-status`: 403, 514, ...); "" accepts."""
        self._refusal = (status, message) if status else None

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if self._refusal is not None:
            status, message = self._refusal
            self.handshakes_refused += 1
            self._changed.set()
            return web.Response(
                status=400, headers={"handshake-status": status, "handshake-msg": message}
            )
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        self.connections_opened += 1
        self._changed.set()
        try:
            async for received in ws:
                if received.type == WSMsgType.BINARY:
                    await self._client_frame(ws, longconn.parse(received.data))
        finally:
            self._sockets.remove(ws)
            self._changed.set()
        return ws

    async def _client_frame(self, ws: web.WebSocketResponse, frame: Frame) -> None:
        if frame.method == longconn.CONTROL and longconn.header(frame, "type") == "ping":
            self.pings += 1
            pong = Frame(
                SeqID=0,
                LogID=0,
                service=frame.service,
                method=longconn.CONTROL,
                headers=[Header(key="type", value="pong")],
                payload=json.dumps(self._config()).encode(),
            )
            await ws.send_bytes(pong.SerializeToString())
        elif frame.method == longconn.DATA:
            ack = json.loads(frame.payload) | {"biz_rt": longconn.header(frame, "biz_rt")}
            self.acks[longconn.header(frame, "message_id")] = ack
        self._changed.set()

    @property
    def open_connections(self) -> int:
        return len(self._sockets)

    async def wait_connected(self, count: int = 1, timeout_s: float = 30.0) -> None:
        await self.wait_until(
            lambda: self.connections_opened >= count and self.open_connections > 0, timeout_s
        )

    def acked(self, frame_id: str) -> bool:
        return self.acks.get(frame_id, {}).get("code") == 200

    async def push_event(
        self, event: JsonObject, *, parts: int = 1, frame_id: str = "", kind: str = "event"
    ) -> str:
        """Send `event` to every open connection, cut into `parts` frames; the frame id. A card
        callback (`card_action_event`) goes in frames of `kind` "card"."""
        frame_id = frame_id or uuid.uuid4().hex
        payload = json.dumps(event, ensure_ascii=False).encode()
        size = -(-len(payload) // parts)
        for seq in range(parts):
            frame = Frame(
                SeqID=seq,
                LogID=next(self._ids),
                service=77,
                method=longconn.DATA,
                headers=[
                    Header(key="type", value=kind),
                    Header(key="message_id", value=frame_id),
                    Header(key="sum", value=str(parts)),
                    Header(key="seq", value=str(seq)),
                    Header(key="trace_id", value=uuid.uuid4().hex),
                ],
                payload=payload[seq * size : (seq + 1) * size],
            )
            for ws in list(self._sockets):
                await ws.send_bytes(frame.SerializeToString())
        return frame_id

    async def push_raw(self, data: bytes) -> None:
        for ws in list(self._sockets):
            await ws.send_bytes(data)

    async def drop_connections(self) -> None:
        for ws in list(self._sockets):
            await ws.close(code=1011, message=b"fake went away")
