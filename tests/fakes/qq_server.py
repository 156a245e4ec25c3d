"""A fake QQ bot open platform on 127.0.0.1: token URL, API v2 messages, signed webhooks.

    async with FakeQQ() as fake:
        channel = QQBotChannel(QQBotConfig(app_id=fake.app_id, app_secret=...,
                               api_base_url=fake.api_base_url, token_url=fake.token_url))
        ...
        event = fake.c2c_message("alice-openid", "hi")
        status, answer = await fake.deliver(webhook_url, event)  # signed like QQ signs
        await fake.wait_until(lambda: fake.replies_to("c2c:alice-openid"))

`POST /app/getAppAccessToken {appId, clientSecret}` answers `{access_token, expires_in: "7200"}`
(a string, as QQ sends it). `POST /v2/users/{openid}/messages` and `/v2/groups/{id}/messages`
need `Authorization: QQBot <token>` and a `msg_id` of a message the fake delivered; they check
what QQ enforces: `msg_seq` unique per `msg_id` (a repeat is error 40054005), at most five
replies per `msg_id`, `GET /users/@me` names the bot. Errors have QQ's shape `{code, message}`.
`rate_limit_next` answers the next send 429 with code 22009; `expire_token` makes the current
token refused (code 11241), as when it expired early. `add_file` serves bytes at a multimedia
URL (`/download/<id>`, plain HTTP here) for an attachment; an unknown id answers 404.
`POST /v2/users/{openid}/files` and `/v2/groups/{id}/files` (`file_type` 1-3, an https `url`)
record the rich media in `media_uploads` by the `file_info` they answer with (QQ would fetch the
URL; the fake does not); a `msg_type` 7 reply must name one in `media.file_info`.

Buttons: a `msg_type` 2 reply carries `markdown.content` (its `content` in `replies`) and may
carry a custom `keyboard` (`keyboard.content.rows`), checked against QQ's documented shape: at
most 5 rows of 5 buttons, ids unique in the keyboard, `render_data` {label, visited_label,
style}, `action` {type 0-2, permission.type, data, unsupport_tips}. `refuse_markdown` answers
such replies 403 (code 11264, the fake's own: QQ documents no code for a missing permission).
`tap(reply, label, user)` builds the INTERACTION_CREATE of a tap on that reply's button, in its
chat (QQ's event: `d.id` the interaction, the dispatch's `id` the event a reply may name as
`event_id` instead of a `msg_id`; the fake counts `msg_seq` per event id as per `msg_id`).
`PUT /interactions/{id}` `{"code"}` answers a tap (empty 200), recorded in `interaction_acks`.

Websocket gateway (`mode: websocket`): `GET /gateway` names `/websocket`, which opens with op 10
(heartbeat interval `heartbeat_interval_ms`), takes op 2 Identify (token and the C2C/group
intent checked; a bad token is closed with 4004) or op 6 Resume (events after the resumed
sequence number are sent again, as QQ does), answers op 1 heartbeats with op 11 (unless
`answer_heartbeats` is False) and records the sequence each reported. `push_gateway(event)`
dispatches an event with the next sequence number (an INTERACTION_CREATE only to a session that
asked for the interaction intent, 1 << 26), `drop_gateway` cuts the connection.

Webhook side: the fake signs like QQ, with the Ed25519 key seeded from the app secret (the
secret repeated to 32 bytes): `sign(body, timestamp)` gives the headers, `deliver` posts an
event and `validate` the op 13 callback-URL check (unsigned, as QQ's own SDK takes it). The
key is made with `cryptography`.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.fakes import ServedFake
from tests.fakes.changes import Changes

JsonObject = dict[str, Any]
MAX_REPLIES = 5


def qq_seed(secret: str) -> bytes:
    """QQ's documented seed: the secret repeated until it has 32 bytes, cut to 32."""
    seed = secret
    while len(seed) < 32:
        seed = seed * 2
    return seed[:32].encode()


MAX_KEYBOARD_ROWS = MAX_ROW_BUTTONS = 5
INTERACTION = "INTERACTION_CREATE"
INTERACTION_INTENT = 1 << 26


@dataclass(frozen=True, slots=True)
class Reply:
    chat_id: str
    content: str
    #: The user's message, or the event (a tap's), the reply answers.
    msg_id: str
    msg_seq: int
    status: int
    code: int | None
    at: float
    #: The rich media a `msg_type` 7 reply names.
    file_info: str = ""
    msg_type: int = 0
    #: A `msg_type` 2 reply's `keyboard`, as sent.
    keyboard: JsonObject | None = None

    def buttons(self) -> list[JsonObject]:
        rows = ((self.keyboard or {}).get("content") or {}).get("rows") or []
        return [button for row in rows for button in row.get("buttons") or []]


@dataclass(frozen=True, slots=True)
class MediaUpload:
    chat_id: str
    file_type: int
    url: str


class FakeQQ(ServedFake):
    def __init__(
        self, *, app_id: str = "102000001", app_secret: str = "naOC0ocQE3shWLAfffVLB1rhYPG7"
    ) -> None:
        self.app_id = app_id
        self.app_secret = app_secret
        self.key = Ed25519PrivateKey.from_private_bytes(qq_seed(app_secret))
        self.token_requests = 0
        self.replies: list[Reply] = []
        self.violations: list[str] = []
        self._token = ""
        self._rate_limits = 0
        self._delivered: dict[str, str] = {}  # msg_id, or a tap's event id -> chat id
        #: Answered with 403 when set: a bot without QQ's Markdown permission.
        self.refuse_markdown = False
        #: interaction id -> the codes `PUT /interactions/{id}` answered it with, in order.
        self.interaction_acks: dict[str, list[int]] = {}
        self._interactions: set[str] = set()
        self._seqs: dict[str, set[int]] = {}
        self._changes = Changes()
        self._numbers = itertools.count(1)
        self.files: dict[str, tuple[bytes, str]] = {}
        self.file_requests: list[str] = []
        #: file_info -> the rich media registered under it.
        self.media_uploads: dict[str, MediaUpload] = {}
        app = web.Application()
        app.router.add_get("/download/{file_id}", self._file)
        app.router.add_post("/app/getAppAccessToken", self._access_token)
        app.router.add_post("/v2/users/{openid}/messages", self._c2c_send)
        app.router.add_post("/v2/groups/{openid}/messages", self._group_send)
        app.router.add_post("/v2/users/{openid}/files", self._c2c_files)
        app.router.add_post("/v2/groups/{openid}/files", self._group_files)
        app.router.add_get("/users/@me", self._me)
        app.router.add_put("/interactions/{interaction_id}", self._interaction_ack)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/websocket", self._websocket)
        self.heartbeat_interval_ms = 41250
        #: False: heartbeats go unanswered, as on a half-dead connection.
        self.answer_heartbeats = True
        self.identifies: list[JsonObject] = []
        self.resumes: list[JsonObject] = []
        self.heartbeats: list[int | None] = []
        self._gateway_sockets: set[web.WebSocketResponse] = set()
        self._session_intents = 0
        self._dispatched: list[JsonObject] = []
        self._session_id = ""
        ServedFake.__init__(self, app)

    async def _before_shutdown(self) -> None:
        for socket in list(self._gateway_sockets):
            await socket.close()

    @property
    def api_base_url(self) -> str:
        return self.origin

    @property
    def token_url(self) -> str:
        return f"{self.origin}/app/getAppAccessToken"

    # -- what a test reads and arranges -----------------------------------------------------

    async def wait_until(self, predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
        await self._changes.wait_until(predicate, timeout_s)

    def replies_to(self, chat_id: str) -> list[str]:
        """The texts QQ accepted for `chat_id`, in order."""
        return [r.content for r in self.replies if r.chat_id == chat_id and r.status == 200]

    def keyboards_to(self, chat_id: str) -> list[Reply]:
        """The replies with a keyboard QQ accepted for `chat_id`, in order."""
        accepted = [r for r in self.replies if r.chat_id == chat_id and r.status == 200]
        return [r for r in accepted if r.keyboard is not None]

    def rate_limit_next(self) -> None:
        self._rate_limits += 1

    def expire_token(self) -> None:
        self._token = "expired-" + self._token

    # -- the webhook sender -----------------------------------------------------------------

    def sign(self, body: bytes, timestamp: int | None = None) -> dict[str, str]:
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        signature = self.key.sign(stamp.encode() + body).hex()
        return {
            "X-Signature-Ed25519": signature,
            "X-Signature-Timestamp": stamp,
            "X-Signature-Method": "Ed25519",
            "X-Bot-Appid": self.app_id,
            "User-Agent": "QQBot-Callback",
            "Content-Type": "application/json",
        }

    def c2c_message(
        self,
        user: str,
        text: str,
        *,
        msg_id: str | None = None,
        attachments: list[JsonObject] | None = None,
    ) -> JsonObject:
        msg_id = msg_id or f"ROBOT1.0_{uuid.uuid4().hex}"
        self._delivered[msg_id] = f"c2c:{user}"
        data: JsonObject = {
            "id": msg_id,
            "content": text,
            "timestamp": "2026-12-01T12:00:00+08:00",
            "author": {"id": user, "user_openid": user},
        }
        if attachments:
            data["attachments"] = attachments
        return self._dispatch("C2C_MESSAGE_CREATE", data)

    def add_file(self, data: bytes, content_type: str) -> str:
        """Serve `data`; its URL for an attachment."""
        file_id = uuid.uuid4().hex
        self.files[file_id] = (data, content_type)
        return f"{self.origin}/download/{file_id}"

    async def _file(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        self.file_requests.append(file_id)
        found = self.files.get(file_id)
        if found is None:
            return web.Response(status=404)
        data, content_type = found
        return web.Response(body=data, content_type=content_type)

    def group_message(self, group: str, member: str, text: str) -> JsonObject:
        msg_id = f"ROBOT1.0_{uuid.uuid4().hex}"
        self._delivered[msg_id] = f"group:{group}"
        data = {
            "id": msg_id,
            "content": f" {text}",
            "timestamp": "2026-12-01T12:00:00+08:00",
            "group_openid": group,
            "author": {"id": member, "member_openid": member},
        }
        return self._dispatch("GROUP_AT_MESSAGE_CREATE", data)

    def tap(self, reply: Reply, label: str, user: str, *, member: str | None = None) -> JsonObject:
        """The INTERACTION_CREATE of `user` (in a group: the member `member`) tapping the button
        labelled `label` under `reply`, as QQ sends it (C2C or group by the reply's chat)."""
        [button] = [b for b in reply.buttons() if b["render_data"]["label"] == label]
        interaction_id = str(uuid.uuid4())
        self._interactions.add(interaction_id)
        kind, _, openid = reply.chat_id.partition(":")
        data: JsonObject = {
            "id": interaction_id,
            "type": 11,
            "version": 1,
            "application_id": self.app_id,
            "timestamp": "2026-12-01T12:00:02+08:00",
            "data": {
                "type": 11,
                "resolved": {"button_data": button["action"]["data"], "button_id": button["id"]},
            },
        }
        if kind == "c2c":
            data |= {"scene": "c2c", "chat_type": 2, "user_openid": openid}
        else:
            data |= {
                "scene": "group",
                "chat_type": 1,
                "group_openid": openid,
                "group_member_openid": member or user,
            }
        event = self._dispatch(INTERACTION, data)
        self._delivered[event["id"]] = reply.chat_id
        return event

    def _dispatch(self, event_type: str, data: JsonObject) -> JsonObject:
        return {
            "id": f"{event_type}:{uuid.uuid4().hex}",
            "op": 0,
            "d": data,
            "s": 1,
            "t": event_type,
        }

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, JsonObject]:
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, data=body, headers=headers) as response,
        ):
            text = await response.text()
            return response.status, (json.loads(text) if text.startswith("{") else {})

    async def deliver(self, url: str, event: JsonObject) -> tuple[int, JsonObject]:
        body = json.dumps(event, ensure_ascii=False).encode()
        return await self.post(url, body, self.sign(body))

    async def validate(self, url: str, plain_token: str, event_ts: str) -> tuple[int, JsonObject]:
        """The op 13 callback-URL check, sent as QQ sends it: without signature headers."""
        body = json.dumps({"op": 13, "d": {"plain_token": plain_token, "event_ts": event_ts}})
        headers = {"Content-Type": "application/json", "X-Bot-Appid": self.app_id}
        return await self.post(url, body.encode(), headers)

    # -- the server -------------------------------------------------------------------------

    async def _access_token(self, request: web.Request) -> web.Response:
        payload = await request.json()
        self.token_requests += 1
        if payload.get("appId") != self.app_id or payload.get("clientSecret") != self.app_secret:
            return web.json_response({"code": 100016, "message": "invalid appid or secret"})
        self._token = f"token-{next(self._numbers)}"
        await self._changes.notify()
        return web.json_response({"access_token": self._token, "expires_in": "7200"})

    def _authorised(self, request: web.Request) -> web.Response | None:
        if not self._token or request.headers.get("Authorization") != f"QQBot {self._token}":
            return web.json_response({"code": 11241, "message": "token not exist"}, status=401)
        return None

    async def _me(self, request: web.Request) -> web.Response:
        refused = self._authorised(request)
        if refused is not None:
            return refused
        return web.json_response({"id": "bot-openid", "username": "octos-test-bot"})

    async def _c2c_send(self, request: web.Request) -> web.Response:
        return await self._send(request, f"c2c:{request.match_info['openid']}")

    async def _group_send(self, request: web.Request) -> web.Response:
        return await self._send(request, f"group:{request.match_info['openid']}")

    async def _send(self, request: web.Request, chat_id: str) -> web.Response:
        refused = self._authorised(request)
        if refused is not None:
            return refused
        body = await request.json()
        msg_id, seq = str(body.get("msg_id") or body.get("event_id") or ""), body.get("msg_seq")
        content = str(body.get("content", ""))
        markdown = body.get("markdown")
        if body.get("msg_type") == 2 and isinstance(markdown, dict):
            content = str(markdown.get("content", ""))
        status, code, message = self._judge(chat_id, msg_id, seq, body)
        media = body.get("media")
        file_info = str(media.get("file_info", "")) if isinstance(media, dict) else ""
        keyboard = body.get("keyboard") if body.get("msg_type") == 2 else None
        self.replies.append(
            Reply(
                chat_id,
                content,
                msg_id,
                int(seq or 0),
                status,
                code,
                time.monotonic(),
                file_info,
                int(body.get("msg_type") or 0),
                keyboard if isinstance(keyboard, dict) else None,
            )
        )
        await self._changes.notify()
        if status != 200:
            return web.json_response(
                {"code": code, "err_code": code, "message": message}, status=status
            )
        return web.json_response({"id": uuid.uuid4().hex, "timestamp": "2026-12-01T12:00:01+08:00"})

    def _judge(
        self, chat_id: str, msg_id: str, seq: object, body: JsonObject
    ) -> tuple[int, int | None, str]:
        if ("msg_id" in body) == ("event_id" in body):
            self.violations.append(f"a reply names both or neither msg_id and event_id: {body}")
            return 400, 40034006, "bad request"
        if self._delivered.get(msg_id) != chat_id:
            self.violations.append(f"reply to unknown msg_id {msg_id!r} in {chat_id}")
            return 400, 40034024, "proactive messages are not allowed"
        if not isinstance(seq, int) or seq < 1 or not self._well_formed(chat_id, body):
            self.violations.append(f"bad msg_seq or msg_type: {body}")
            return 400, 40034006, "bad request"
        if body.get("msg_type") == 2 and self.refuse_markdown:
            return 403, 11264, "no permission for markdown"
        if self._rate_limits:
            self._rate_limits -= 1
            return 429, 22009, "msg limit exceed"
        used = self._seqs.setdefault(msg_id, set())
        if seq in used:
            return 400, 40054005, "消息被去重，请检查请求msgseq"
        if len(used) >= MAX_REPLIES:
            self.violations.append(f"a sixth reply to {msg_id}")
            return 400, 22009, "msg limit exceed"
        used.add(seq)
        return 200, None, ""

    def _well_formed(self, chat_id: str, body: JsonObject) -> bool:
        if body.get("msg_type") == 0:
            return True
        if body.get("msg_type") == 2:
            markdown = body.get("markdown")
            text = markdown.get("content") if isinstance(markdown, dict) else None
            keyboard = body.get("keyboard")
            return (
                isinstance(text, str)
                and bool(text)
                and (keyboard is None or _keyboard_problems(keyboard) == [])
            )
        media = body.get("media")
        file_info = media.get("file_info") if isinstance(media, dict) else None
        upload = self.media_uploads.get(str(file_info))
        return body.get("msg_type") == 7 and upload is not None and upload.chat_id == chat_id

    async def _interaction_ack(self, request: web.Request) -> web.Response:
        refused = self._authorised(request)
        if refused is not None:
            return refused
        interaction_id = request.match_info["interaction_id"]
        body = await request.json()
        code = body.get("code") if isinstance(body, dict) else None
        known = isinstance(code, int) and 0 <= code <= 5  # 0 success ... 5 admins only
        if interaction_id not in self._interactions or not isinstance(code, int) or not known:
            self.violations.append(f"bad interaction answer {interaction_id}: {body}")
            return web.json_response({"code": 40034006, "message": "bad request"}, status=400)
        self.interaction_acks.setdefault(interaction_id, []).append(code)
        await self._changes.notify()
        return web.Response(status=200)

    async def _c2c_files(self, request: web.Request) -> web.Response:
        return await self._files(request, f"c2c:{request.match_info['openid']}")

    async def _group_files(self, request: web.Request) -> web.Response:
        return await self._files(request, f"group:{request.match_info['openid']}")

    async def _files(self, request: web.Request, chat_id: str) -> web.Response:
        refused = self._authorised(request)
        if refused is not None:
            return refused
        body = await request.json()
        file_type, url = body.get("file_type"), body.get("url")
        if file_type not in (1, 2, 3) or not str(url).startswith("https://"):
            self.violations.append(f"bad rich media upload: {body}")
            return web.json_response({"code": 40034006, "message": "bad request"}, status=400)
        file_info = uuid.uuid4().hex
        self.media_uploads[file_info] = MediaUpload(chat_id, int(file_type), str(url))
        await self._changes.notify()
        return web.json_response({"file_uuid": uuid.uuid4().hex, "file_info": file_info, "ttl": 0})

    # -- the websocket gateway --------------------------------------------------------------

    @property
    def gateway_connections(self) -> int:
        return len(self._gateway_sockets)

    @property
    def last_seq(self) -> int:
        """The sequence number of the last event dispatched over the gateway."""
        return int(self._dispatched[-1]["s"]) if self._dispatched else 1

    async def push_gateway(self, event: JsonObject) -> JsonObject:
        """Dispatch `event` (from c2c_message / group_message / tap) over the gateway."""
        frame = {**event, "s": len(self._dispatched) + 2}  # READY was 1
        self._dispatched.append(frame)
        if frame.get("t") == INTERACTION and not self._session_intents & INTERACTION_INTENT:
            return frame  # QQ sends taps only to a session that asked for them
        for socket in list(self._gateway_sockets):
            await socket.send_str(json.dumps(frame, ensure_ascii=False))
        return frame

    async def drop_gateway(self) -> None:
        for socket in list(self._gateway_sockets):
            await socket.close(code=4009)

    async def _gateway(self, request: web.Request) -> web.Response:
        refused = self._authorised(request)
        if refused is not None:
            return refused
        return web.json_response({"url": f"ws://127.0.0.1:{self._server.port}/websocket"})

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_json({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
        try:
            async for message in socket:
                if message.type == aiohttp.WSMsgType.TEXT:
                    await self._gateway_frame(socket, json.loads(message.data))
        finally:
            self._gateway_sockets.discard(socket)
            await self._changes.notify()
        return socket

    async def _gateway_frame(self, socket: web.WebSocketResponse, frame: JsonObject) -> None:
        op, data = frame.get("op"), frame.get("d")
        if op in (2, 6) and isinstance(data, dict):
            if data.get("token") != f"QQBot {self._token}":
                await socket.close(code=4004)
                return
            if op == 2:
                self.identifies.append(data)
                if not int(data.get("intents", 0)) & (1 << 25):
                    self.violations.append(f"identify without the C2C/group intent: {data}")
                self._session_id = uuid.uuid4().hex
                self._session_intents = int(data.get("intents", 0))
                self._gateway_sockets.add(socket)
                ready = {"session_id": self._session_id, "user": {"id": "bot-openid"}}
                await socket.send_json({"op": 0, "s": 1, "t": "READY", "d": ready})
            else:
                self.resumes.append(data)
                if data.get("session_id") != self._session_id:
                    await socket.send_json({"op": 9, "d": False})
                    return
                self._gateway_sockets.add(socket)
                await socket.send_json({"op": 0, "s": 1, "t": "RESUMED", "d": ""})
                for missed in self._dispatched:
                    if missed["s"] > int(data.get("seq") or 0):
                        await socket.send_str(json.dumps(missed, ensure_ascii=False))
        elif op == 1:
            self.heartbeats.append(data if isinstance(data, int) else None)
            if self.answer_heartbeats:
                await socket.send_json({"op": 11})
        await self._changes.notify()


def _keyboard_problems(keyboard: object) -> list[str]:
    """What a custom keyboard does wrong against QQ's documented shape (empty: nothing)."""
    content = keyboard.get("content") if isinstance(keyboard, dict) else None
    rows = content.get("rows") if isinstance(content, dict) else None
    if not isinstance(rows, list) or not rows or len(rows) > MAX_KEYBOARD_ROWS:
        return [f"rows: {rows!r}"]
    problems: list[str] = []
    ids: list[object] = []
    for row in rows:
        buttons = row.get("buttons") if isinstance(row, dict) else None
        if not isinstance(buttons, list) or not buttons or len(buttons) > MAX_ROW_BUTTONS:
            problems.append(f"row: {row!r}")
            continue
        for button in buttons:
            render = button.get("render_data") or {}
            action = button.get("action") or {}
            ids.append(button.get("id"))
            if not (
                isinstance(render.get("label"), str)
                and isinstance(render.get("visited_label"), str)
                and render.get("style") in (0, 1)
                and action.get("type") in (0, 1, 2)
                and (action.get("permission") or {}).get("type") in (0, 1, 2, 3)
                and isinstance(action.get("data"), str)
                and isinstance(action.get("unsupport_tips"), str)
            ):
                problems.append(f"button: {button!r}")
    if len(set(map(str, ids))) != len(ids):
        problems.append(f"button ids not unique: {ids!r}")
    return problems
