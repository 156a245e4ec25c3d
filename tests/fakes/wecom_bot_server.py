"""A fake WeCom AI bot server on 127.0.0.1: the long-connection websocket protocol.

    async with FakeWecomBot() as fake:
        channel = WecomBotChannel(WecomBotConfig(bot_id=fake.bot_id, ws_url=fake.ws_url, ...),
                                  data_dir=tmp_path)
        ...
        await fake.wait_subscribed()
        req_id, msg_id = await fake.push_text("alice", "hi")
        await fake.wait_until(lambda: fake.finished_text(req_id) == "hi")

Frames are `{cmd, headers: {req_id}, body}`. The client's `aibot_subscribe` (bot id and secret
checked), `ping`, `aibot_respond_msg` and `aibot_send_msg` are each acknowledged with
`{headers: {req_id}, errcode, errmsg}`; the fake pushes `aibot_msg_callback` frames a test asks
for. It checks what the real server enforces or what the protocol requires of a client, and
records each breach in `violations`: a frame answering a `req_id` before the previous one for
that `req_id` was acknowledged, a frame for an unknown `req_id`, a second stream on one `req_id`,
a frame after a stream's `finish`, stream content over 20,480 bytes, Markdown over 4,096 bytes.

`answer_pings = False` leaves pings unanswered; `ack_delay_s` holds every acknowledgement of
a reply that long (so an impatient client shows); `rate_limit_next` answers the next reply
frame with errcode 45009; `drop_connections` cuts the socket; `push_raw` sends anything.

Files: `add_file` serves bytes at `{origin}/files/<id>` encrypted as WeCom does (AES-256-CBC
under a fresh per-message `aeskey`, IV its first 16 bytes, PKCS#7 to 32-byte blocks), with a
Content-Disposition naming the file when given; `push_media` sends an image, file or mixed
callback carrying `{"url", "aeskey"}`; an unknown file id answers 404.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.fakes import ServedFake
from tests.fakes.changes import Changes

JsonObject = dict[str, Any]
STREAM_LIMIT_BYTES = 20_480
MARKDOWN_LIMIT_BYTES = 4_096
RATE_LIMITED = 45009


@dataclass(frozen=True, slots=True)
class StreamFrame:
    req_id: str
    stream_id: str
    content: str
    finish: bool
    at: float


@dataclass
class _Callback:
    chat_id: str
    stream_id: str | None = None
    finished: bool = False
    awaiting_ack: bool = False
    frames: list[StreamFrame] = field(default_factory=list)


class FakeWecomBot(ServedFake):
    def __init__(self, *, bot_id: str = "aibFAKEBOT01", secret: str = "fake-bot-secret") -> None:
        self.bot_id = bot_id
        self.secret = secret
        self.ack_delay_s = 0.0
        #: False: pings go unanswered, as on a half-dead connection.
        self.answer_pings = True
        self.violations: list[str] = []
        self.subscribes: list[JsonObject] = []
        self.pings = 0
        self.sent: list[JsonObject] = []  # aibot_send_msg bodies
        self.callbacks: dict[str, _Callback] = {}
        self.reply_errors: list[int] = []
        self.connections_opened = 0
        self._rate_limits = 0
        self._sockets: set[web.WebSocketResponse] = set()
        self._subscribed: set[web.WebSocketResponse] = set()
        self._changes = Changes()
        self._numbers = itertools.count(1)
        self._acks: set[asyncio.Task[None]] = set()
        self.files: dict[str, tuple[bytes, str | None]] = {}
        self.file_requests: list[str] = []
        app = web.Application()
        app.router.add_get("/", self._websocket)
        app.router.add_get("/files/{file_id}", self._file)
        ServedFake.__init__(self, app)

    async def _before_shutdown(self) -> None:
        for task in list(self._acks):
            task.cancel()
        await asyncio.gather(*self._acks, return_exceptions=True)
        for socket in list(self._sockets):
            await socket.close()

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self._server.port}/"

    @property
    def open_connections(self) -> int:
        return len(self._subscribed)

    # -- what a test reads ------------------------------------------------------------------

    async def wait_until(self, predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
        await self._changes.wait_until(predicate, timeout_s)

    async def wait_subscribed(self, count: int = 1, timeout_s: float = 10.0) -> None:
        """Wait until `count` subscriptions succeeded in all and one connection is live."""
        await self.wait_until(lambda: len(self.subscribes) >= count and self._subscribed, timeout_s)

    def frames(self, req_id: str) -> list[StreamFrame]:
        callback = self.callbacks.get(req_id)
        return list(callback.frames) if callback else []

    def finished_text(self, req_id: str) -> str | None:
        """The final text of the stream answering `req_id`, once finished."""
        callback = self.callbacks.get(req_id)
        if callback is None or not callback.finished:
            return None
        return callback.frames[-1].content

    def markdown_to(self, chat_id: str) -> list[str]:
        return [
            str(body["markdown"]["content"]) for body in self.sent if body.get("chatid") == chat_id
        ]

    def rate_limit_next(self) -> None:
        self._rate_limits += 1

    # -- what a test does -------------------------------------------------------------------

    async def push_text(
        self, user: str, text: str, *, chat_id: str | None = None, msg_id: str | None = None
    ) -> tuple[str, str]:
        """A user's text message (in a group when `chat_id` is given); (req_id, msg_id)."""
        req_id = f"cb_{next(self._numbers)}_{uuid.uuid4().hex[:8]}"
        msg_id = msg_id or f"msg{uuid.uuid4().hex}"
        body: JsonObject = {
            "msgid": msg_id,
            "aibotid": self.bot_id,
            "chattype": "group" if chat_id else "single",
            "from": {"userid": user},
            "msgtype": "text",
            "text": {"content": text},
        }
        if chat_id:
            body["chatid"] = chat_id
        self.callbacks[req_id] = _Callback(chat_id or user)
        await self._push({"cmd": "aibot_msg_callback", "headers": {"req_id": req_id}, "body": body})
        return req_id, msg_id

    def add_file(self, data: bytes, *, filename: str | None = None) -> JsonObject:
        """Serve `data` encrypted; the `{"url", "aeskey"}` a callback carries for it."""
        key = os.urandom(32)
        padder = padding.PKCS7(256).padder()
        padded = padder.update(data) + padder.finalize()
        encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
        file_id = uuid.uuid4().hex
        self.files[file_id] = (encryptor.update(padded) + encryptor.finalize(), filename)
        aeskey = base64.b64encode(key).decode().rstrip("=")
        return {"url": f"{self.origin}/files/{file_id}", "aeskey": aeskey}

    async def _file(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        self.file_requests.append(file_id)
        found = self.files.get(file_id)
        if found is None:
            return web.Response(status=404)
        sealed, filename = found
        headers = {"Content-Disposition": f'attachment; filename="{filename}"'} if filename else {}
        return web.Response(body=sealed, content_type="application/octet-stream", headers=headers)

    async def push_media(self, user: str, msgtype: str, content: JsonObject) -> tuple[str, str]:
        """An image (`content` is `add_file`'s), file or mixed (`{"msg_item": [...]}`) message
        from `user` in a single chat; (req_id, msg_id)."""
        req_id = f"cb_{next(self._numbers)}_{uuid.uuid4().hex[:8]}"
        msg_id = f"msg{uuid.uuid4().hex}"
        body: JsonObject = {
            "msgid": msg_id,
            "aibotid": self.bot_id,
            "chattype": "single",
            "from": {"userid": user},
            "msgtype": msgtype,
            msgtype: content,
        }
        self.callbacks[req_id] = _Callback(user)
        await self._push({"cmd": "aibot_msg_callback", "headers": {"req_id": req_id}, "body": body})
        return req_id, msg_id

    async def push_event(self, event_type: str) -> None:
        """An `aibot_event_callback` (enter_chat, disconnected_event...)."""
        body = {
            "msgid": f"ev{uuid.uuid4().hex}",
            "msgtype": "event",
            "event": {"eventtype": event_type},
        }
        req_id = f"ev_{next(self._numbers)}"
        await self._push(
            {"cmd": "aibot_event_callback", "headers": {"req_id": req_id}, "body": body}
        )

    async def push_raw(self, text: str) -> None:
        for socket in list(self._subscribed):
            await socket.send_str(text)

    async def drop_connections(self) -> None:
        for socket in list(self._sockets):
            await socket.close(code=1011)

    async def _push(self, frame: JsonObject) -> None:
        if not self._subscribed:
            raise AssertionError("no subscribed connection to push to")
        for socket in list(self._subscribed):
            await socket.send_str(json.dumps(frame, ensure_ascii=False))

    # -- the server -------------------------------------------------------------------------

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self._sockets.add(socket)
        self.connections_opened += 1
        try:
            async for message in socket:
                if message.type == WSMsgType.TEXT:
                    await self._frame(socket, json.loads(message.data))
        finally:
            self._sockets.discard(socket)
            self._subscribed.discard(socket)
            await self._changes.notify()
        return socket

    async def _ack(self, socket: web.WebSocketResponse, req_id: str, errcode: int = 0) -> None:
        await socket.send_str(
            json.dumps({"headers": {"req_id": req_id}, "errcode": errcode, "errmsg": "ok"})
        )

    async def _frame(self, socket: web.WebSocketResponse, frame: JsonObject) -> None:
        cmd, req_id = frame.get("cmd"), frame.get("headers", {}).get("req_id", "")
        body = frame.get("body") or {}
        if cmd == "aibot_subscribe":
            self.subscribes.append(body)
            good = body.get("bot_id") == self.bot_id and body.get("secret") == self.secret
            await self._ack(socket, req_id, 0 if good else 40058)
            if good:
                self._subscribed.add(socket)
            else:
                await socket.close()
        elif socket not in self._subscribed:
            self.violations.append(f"{cmd} before a successful aibot_subscribe")
        elif cmd == "ping":
            self.pings += 1
            if self.answer_pings:
                await self._ack(socket, req_id)
        elif cmd == "aibot_respond_msg":
            await self._respond(socket, req_id, body)
        elif cmd == "aibot_send_msg":
            await self._send_msg(socket, req_id, body)
        else:
            self.violations.append(f"unknown cmd {cmd!r}")
        await self._changes.notify()

    def _take_rate_limit(self) -> bool:
        if self._rate_limits:
            self._rate_limits -= 1
            self.reply_errors.append(RATE_LIMITED)
            return True
        return False

    async def _respond(self, socket: web.WebSocketResponse, req_id: str, body: JsonObject) -> None:
        callback = self.callbacks.get(req_id)
        if callback is None:
            self.violations.append(f"aibot_respond_msg for unknown req_id {req_id}")
            await self._ack(socket, req_id, 846605)
            return
        if callback.awaiting_ack:
            self.violations.append(f"{req_id}: a frame sent before the previous one was acked")
        stream = body.get("stream") or {}
        content, stream_id = str(stream.get("content", "")), str(stream.get("id", ""))
        if body.get("msgtype") != "stream" or not stream_id:
            self.violations.append(f"{req_id}: not a stream reply: {body}")
        if len(content.encode()) > STREAM_LIMIT_BYTES:
            self.violations.append(f"{req_id}: stream content of {len(content.encode())} bytes")
        if self._take_rate_limit():
            await self._ack(socket, req_id, RATE_LIMITED)
            return
        if callback.stream_id not in (None, stream_id):
            self.violations.append(f"{req_id}: a second stream {stream_id}")
        if callback.finished:
            self.violations.append(f"{req_id}: a frame after the stream finished")
        callback.stream_id = stream_id
        callback.finished = callback.finished or bool(stream.get("finish"))
        callback.frames.append(
            StreamFrame(req_id, stream_id, content, bool(stream.get("finish")), time.monotonic())
        )
        callback.awaiting_ack = True
        # Acknowledged from a task of its own, so the reader sees a frame sent too early.
        task = asyncio.create_task(self._ack_later(socket, callback, req_id), name="fake-ack")
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    async def _ack_later(
        self, socket: web.WebSocketResponse, callback: _Callback, req_id: str
    ) -> None:
        if self.ack_delay_s:
            await asyncio.sleep(self.ack_delay_s)  # the server's own pace, not a test's sync
        callback.awaiting_ack = False
        if not socket.closed:
            await self._ack(socket, req_id)
        await self._changes.notify()

    async def _send_msg(self, socket: web.WebSocketResponse, req_id: str, body: JsonObject) -> None:
        content = str((body.get("markdown") or {}).get("content", ""))
        if body.get("msgtype") != "markdown" or not body.get("chatid"):
            self.violations.append(f"aibot_send_msg without chatid or markdown: {body}")
        if len(content.encode()) > MARKDOWN_LIMIT_BYTES:
            self.violations.append(f"aibot_send_msg markdown of {len(content.encode())} bytes")
        if self._take_rate_limit():
            await self._ack(socket, req_id, RATE_LIMITED)
            return
        self.sent.append(body)
        await self._ack(socket, req_id)
