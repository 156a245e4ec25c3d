"""A fake WeCom AI bot server on 127.0.0.1: the long-connection websocket protocol.

    async with FakeWecomBot() as fake:
        channel = WecomBotChannel(WecomBotConfig(bot_id=fake.bot_id, ws_url=fake.ws_url, ...),
                                  data_dir=tmp_path)
        ...
        await fake.wait_subscribed()
        req_id, msg_id = await fake.push_text("alice", "hi")
        await fake.wait_until(lambda: fake.finished_text(req_id) == "hi")

Frames are `{cmd, headers: {req_id}, body}`. The client's `aibot_subscribe` (bot id and secret
checked), `ping`, `aibot_respond_msg`, `aibot_send_msg` and `aibot_respond_update_msg` are each
acknowledged with `{headers: {req_id}, errcode, errmsg}`; the fake pushes `aibot_msg_callback`
frames a test asks for. It checks what the real server enforces or what the protocol requires
of a client, and records each breach in `violations`: a frame answering a `req_id` before the
previous one for that `req_id` was acknowledged, a frame for an unknown `req_id`, a second stream
on one `req_id`, a frame after a stream's `finish`, stream content over 20,480 bytes, Markdown
over 4,096 bytes.

Template cards: a `button_interaction` card (as the reply to a callback, which then takes no
other, or sent with `aibot_send_msg`) is checked against the documented shape and lengths (a
`main_title.title` of at most 26 characters and `desc` of 30, 1 to 6 buttons with a `text` of
at most 10 characters and a unique `key` of at most 1,024 bytes, a `task_id` of digits, letters
and "_-@" up to 128 bytes, never used twice) and kept as `cards[task_id]`. `push_card_event`
sends a tap (`template_card_event`, its fields under `event.template_card_event`); its `req_id`
takes only `aibot_respond_update_msg` (anything else is refused with errcode 846605), within 5 s
of the event (later: refused, errcode 846608), naming the tapped card's `task_id`; the update
replaces `cards[task_id]` and is kept in `card_updates`. A card WeCom would refuse is answered
with errcode 40058; one past a recommended length only is taken, the breach recorded.

`answer_pings = False` leaves pings unanswered; `ack_delay_s` holds every acknowledgement of
a reply that long (so an impatient client shows); `rate_limit_next` answers the next reply
frame with errcode 45009, `rate_limit_next_card` the next template card; `drop_connections`
cuts the socket; `push_raw` sends anything.

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
import re
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
#: What a frame on a card event's `req_id` other than a card update is answered.
NOT_AN_UPDATE = 846605
#: What a card update past the event's window is answered (the real code is not documented).
UPDATE_TOO_LATE = 846608
UPDATE_WINDOW_S = 5.0
#: What a card WeCom would not take is answered ("invalid parameter").
INVALID_CARD = 40058
CARD_TITLE_MAX, CARD_DESC_MAX, BUTTON_TEXT_MAX, CARD_MAX_BUTTONS = 26, 30, 10, 6
BUTTON_KEY_MAX_BYTES = 1_024
TASK_ID = re.compile(r"[0-9A-Za-z_@-]{1,128}")


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
    #: The task id of the card that answered it.
    card: str | None = None


@dataclass(frozen=True, slots=True)
class CardSent:
    """A template card as the bot sent it: answering callback `req_id`, or to `chat_id`."""

    task_id: str
    card: JsonObject
    req_id: str | None
    chat_id: str | None


@dataclass
class _CardEvent:
    task_id: str
    at: float


@dataclass(frozen=True, slots=True)
class CardUpdate:
    req_id: str
    task_id: str
    card: JsonObject


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
        #: Each template card the bot sent, in order; `cards` has each as it is shown now.
        self.cards_sent: list[CardSent] = []
        self.cards: dict[str, JsonObject] = {}
        self.card_events: dict[str, _CardEvent] = {}
        self.card_updates: list[CardUpdate] = []
        self.reply_errors: list[int] = []
        self.connections_opened = 0
        self._rate_limits = 0
        self._card_rate_limits = 0
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

    def cards_to(self, chat_id: str) -> list[CardSent]:
        """The cards the bot sent into `chat_id`, answering a callback there or of its own."""
        return [
            sent
            for sent in self.cards_sent
            if sent.chat_id == chat_id
            or (sent.req_id is not None and self.callbacks[sent.req_id].chat_id == chat_id)
        ]

    def rate_limit_next(self) -> None:
        self._rate_limits += 1

    def rate_limit_next_card(self) -> None:
        """Answer the next template card (not the frames before it) with errcode 45009."""
        self._card_rate_limits += 1

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

    async def push_card_event(
        self,
        user: str,
        task_id: str,
        event_key: str,
        *,
        chat_id: str | None = None,
        msg_id: str | None = None,
    ) -> tuple[str, str]:
        """A tap by `user` on the button `event_key` of card `task_id` (in a group when
        `chat_id` is given), as the documented `template_card_event`; (req_id, msg_id). The same
        `msg_id` again is WeCom delivering the event twice."""
        req_id = f"ev_{next(self._numbers)}_{uuid.uuid4().hex[:8]}"
        msg_id = msg_id or f"ev{uuid.uuid4().hex}"
        body: JsonObject = {
            "msgid": msg_id,
            "create_time": int(time.time()),
            "aibotid": self.bot_id,
            "chattype": "group" if chat_id else "single",
            "from": {"userid": user},
            "msgtype": "event",
            "event": {
                "eventtype": "template_card_event",
                "template_card_event": {
                    "card_type": "button_interaction",
                    "event_key": event_key,
                    "task_id": task_id,
                },
            },
        }
        if chat_id:
            body["chatid"] = chat_id
        self.card_events[req_id] = _CardEvent(task_id, time.monotonic())
        await self._push(
            {"cmd": "aibot_event_callback", "headers": {"req_id": req_id}, "body": body}
        )
        return req_id, msg_id

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
        elif cmd == "aibot_respond_update_msg":
            await self._update_card(socket, req_id, body)
        else:
            self.violations.append(f"unknown cmd {cmd!r}")
        await self._changes.notify()

    def _take_rate_limit(self, *, card: bool = False) -> bool:
        if card and self._card_rate_limits:
            self._card_rate_limits -= 1
            self.reply_errors.append(RATE_LIMITED)
            return True
        if self._rate_limits:
            self._rate_limits -= 1
            self.reply_errors.append(RATE_LIMITED)
            return True
        return False

    async def _respond(self, socket: web.WebSocketResponse, req_id: str, body: JsonObject) -> None:
        callback = self.callbacks.get(req_id)
        if callback is None:
            what = "a card event" if req_id in self.card_events else "unknown"
            self.violations.append(f"aibot_respond_msg for {what} req_id {req_id}")
            await self._ack(socket, req_id, NOT_AN_UPDATE)
            return
        if callback.awaiting_ack:
            self.violations.append(f"{req_id}: a frame sent before the previous one was acked")
        if body.get("msgtype") == "template_card":
            await self._card_reply(socket, req_id, callback, body)
            return
        if callback.card is not None:
            self.violations.append(f"{req_id}: a stream after the card that answered it")
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

    async def _card_reply(
        self, socket: web.WebSocketResponse, req_id: str, callback: _Callback, body: JsonObject
    ) -> None:
        if callback.stream_id is not None or callback.card is not None:
            self.violations.append(f"{req_id}: a card after the reply that answered it")
        card = self._sent_card(body.get("template_card"))
        if card is None:
            await self._ack(socket, req_id, INVALID_CARD)
            return
        if self._take_rate_limit(card=True):
            await self._ack(socket, req_id, RATE_LIMITED)
            return
        callback.card = str(card["task_id"])
        self._keep_card(card, req_id=req_id, chat_id=None)
        await self._ack(socket, req_id)

    def _card_breaches(self, card: object) -> tuple[list[str], list[str]]:
        """How `card` departs from a button interaction card as WeCom documents it: what WeCom
        refuses, and what passes only the lengths it recommends."""
        if not isinstance(card, dict):
            return [f"a template_card that is no object: {card!r}"], []
        refused, long = [], []
        if card.get("card_type") != "button_interaction":
            refused.append(f"card_type {card.get('card_type')!r}")
        title = card.get("main_title")
        if not isinstance(title, dict) or not (title.get("title") or card.get("sub_title_text")):
            refused.append("no main_title.title")
        else:
            if len(str(title.get("title", ""))) > CARD_TITLE_MAX:
                long.append(f"a title of {len(str(title['title']))} characters")
            if len(str(title.get("desc", ""))) > CARD_DESC_MAX:
                long.append(f"a title desc of {len(str(title['desc']))} characters")
        buttons = card.get("button_list")
        if not isinstance(buttons, list) or not 1 <= len(buttons) <= CARD_MAX_BUTTONS:
            refused.append(f"button_list {buttons!r}")
            buttons = []
        buttons = [button for button in buttons if isinstance(button, dict)]
        keys = [str(button.get("key", "")) for button in buttons]
        if len(set(keys)) != len(keys):
            refused.append("two buttons with one key")
        for button in buttons:
            text, key = str(button.get("text", "")), str(button.get("key", ""))
            if not text:
                refused.append("a button without text")
            elif len(text) > BUTTON_TEXT_MAX:
                long.append(f"a button text {text!r}")
            if not key or len(key.encode()) > BUTTON_KEY_MAX_BYTES:
                refused.append(f"a button key of {len(key.encode())} bytes")
            if button.get("style", 1) not in (1, 2, 3, 4):
                long.append(f"a button style {button.get('style')!r}")
        if not TASK_ID.fullmatch(str(card.get("task_id", ""))):
            refused.append(f"task_id {card.get('task_id')!r}")
        return refused, long

    def _sent_card(self, card: object) -> JsonObject | None:
        """`card` when WeCom takes it (its task id new); else None. Every breach is a
        violation."""
        refused, long = self._card_breaches(card)
        if not refused and isinstance(card, dict) and str(card["task_id"]) in self.cards:
            refused.append(f"task_id {card['task_id']} used again")
        if refused or long:
            self.violations.append(f"template card: {'; '.join([*refused, *long])}")
        if refused or not isinstance(card, dict):
            return None
        return card

    def _keep_card(self, card: JsonObject, *, req_id: str | None, chat_id: str | None) -> None:
        task_id = str(card["task_id"])
        self.cards[task_id] = card
        self.cards_sent.append(CardSent(task_id, card, req_id, chat_id))

    async def _update_card(
        self, socket: web.WebSocketResponse, req_id: str, body: JsonObject
    ) -> None:
        event = self.card_events.get(req_id)
        if event is None:
            self.violations.append(f"aibot_respond_update_msg for {req_id}, no card event")
            await self._ack(socket, req_id, NOT_AN_UPDATE)
            return
        if time.monotonic() - event.at > UPDATE_WINDOW_S:
            self.violations.append(f"{req_id}: the card updated after {UPDATE_WINDOW_S:g} s")
            await self._ack(socket, req_id, UPDATE_TOO_LATE)
            return
        card = body.get("template_card")
        refused, long = self._card_breaches(card)
        if body.get("response_type") != "update_template_card":
            refused.append(f"response_type {body.get('response_type')!r}")
        if isinstance(card, dict) and card.get("task_id") != event.task_id:
            refused.append(f"task_id {card.get('task_id')!r}, not the tapped {event.task_id}")
        if refused or long:
            self.violations.append(f"card update {req_id}: {'; '.join([*refused, *long])}")
        if refused or not isinstance(card, dict):
            await self._ack(socket, req_id, INVALID_CARD)
            return
        self.cards[event.task_id] = card
        self.card_updates.append(CardUpdate(req_id, event.task_id, card))
        await self._ack(socket, req_id)

    async def _send_msg(self, socket: web.WebSocketResponse, req_id: str, body: JsonObject) -> None:
        if body.get("msgtype") == "template_card" and body.get("chatid"):
            card = self._sent_card(body.get("template_card"))
            if card is None:
                await self._ack(socket, req_id, INVALID_CARD)
                return
            if self._take_rate_limit(card=True):
                await self._ack(socket, req_id, RATE_LIMITED)
                return
            self._keep_card(card, req_id=None, chat_id=str(body["chatid"]))
            await self._ack(socket, req_id)
            return
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
