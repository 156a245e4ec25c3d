"""The fake Bot API server: aiohttp on 127.0.0.1, recording every request.

Routes: `/bot<token>/<method>` (any HTTP method; query, JSON, urlencoded or multipart
parameters), `/file/bot<token>/<path>` (downloads of files named by getFile), and for a fake
run standalone `/_control/updates` (POST an update) and `/_control/requests` (GET the record).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.fakes.outage import Outage
from tests.fakes.telegram_server.flood import FloodControl
from tests.fakes.telegram_server.methods import BotApiMethods
from tests.fakes.telegram_server.state import (
    ApiError,
    BotState,
    RecordedRequest,
    StoredFile,
    detect_entities,
    int_param,
)
from tests.fakes.telegram_server.wire import read_params

DEFAULT_TOKEN = "123456789:TEST-fake-token_abcdefghijklmnopqrstu"
# Telegram answers 401 to a well-formed token it does not know, 404 to anything else.
_TOKEN_SHAPE = re.compile(r"\d+:[A-Za-z0-9_-]+")


class _Injected:
    def __init__(self, error: ApiError | None, body: bytes | None, status: int, times: int):
        self.error, self.body, self.status, self.remaining = error, body, status, times


class FakeTelegram:
    """The fake Bot API; an async context manager serving on 127.0.0.1 at a free port."""

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        bot_id: int = 7000001,
        bot_username: str = "octos_test_bot",
        host: str = "127.0.0.1",
        port: int = 0,
        flood: FloodControl | None = None,
    ) -> None:
        """`flood`: enforce Telegram's flood limits (429 with `retry_after` past them)."""
        self.token = token
        self.flood = flood
        self.state = BotState(
            {
                "id": bot_id,
                "is_bot": True,
                "first_name": "Octos Test",
                "username": bot_username,
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            }
        )
        self._methods = BotApiMethods(self.state)
        self._host, self._port = host, port
        self._runner: web.AppRunner | None = None
        self.requests: list[RecordedRequest] = []
        self._injected: dict[str, list[_Injected]] = {}
        self._change = asyncio.Event()
        self._drops = 0
        self._long_polls: dict[int, web.Request] = {}
        #: method (lower case) -> the event its held calls wait for (`hold`).
        self._held: dict[str, asyncio.Event] = {}
        #: `async with fake.outage.down():` answers every request 500 (see `Outage`).
        self.outage = Outage()

    # Lifecycle

    async def __aenter__(self) -> FakeTelegram:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        app = web.Application(
            client_max_size=64 * 1024 * 1024, middlewares=[self.outage.middleware]
        )
        app.router.add_route("*", "/bot{token}/{method}", self._handle_api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._handle_file)
        app.router.add_post("/_control/updates", self._handle_control_update)
        app.router.add_get("/_control/requests", self._handle_control_requests)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()
        self._port = self._runner.addresses[0][1]

    async def close(self) -> None:
        for release in self._held.values():
            release.set()
        if self._runner is not None:
            self.drop_connections()
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        """python-telegram-bot's `base_url`: the token is appended to it."""
        return f"http://{self._host}:{self._port}/bot"

    @property
    def base_file_url(self) -> str:
        return f"http://{self._host}:{self._port}/file/bot"

    @property
    def bot_user(self) -> dict[str, Any]:
        return self.state.bot_user

    # Injection

    def fail_next(
        self,
        method: str,
        status: int,
        description: str,
        retry_after: float | None = None,
        times: int = 1,
    ) -> None:
        """The next `times` calls of `method` get this error answer instead."""
        error = ApiError(status, description, retry_after)
        self._injected.setdefault(method.lower(), []).append(_Injected(error, None, status, times))

    def recover(self, method: str) -> None:
        """Calls of `method` are answered normally again: its failures still to come are dropped."""
        self._injected.pop(method.lower(), None)

    def hold(self, method: str) -> asyncio.Event:
        """Calls of `method` are recorded, then answered only once the returned event is set
        (or the fake closes)."""
        return self._held.setdefault(method.lower(), asyncio.Event())

    def respond_next_raw(self, method: str, body: bytes, status: int = 200, times: int = 1) -> None:
        """The next `times` calls of `method` get `body` verbatim (malformed JSON, say)."""
        self._injected.setdefault(method.lower(), []).append(_Injected(None, body, status, times))

    def push_update(self, update: dict[str, Any]) -> int:
        """Queue an update (given an `update_id` when it has none); returns its id."""
        update = dict(update)
        update_id = int(update.setdefault("update_id", next(self.state.update_ids)))
        self.state.pending.append((update_id, update))
        self._notify()
        return update_id

    def push_raw_update(self, payload: object) -> int:
        """Queue anything as an update. A dict keeps (or gets) an `update_id` and waits for its
        confirmation like any update; anything else is delivered once, as no client could
        confirm it. Returns the id the fake filed it under."""
        if isinstance(payload, dict):
            return self.push_update(payload)
        update_id = next(self.state.update_ids)
        self.state.pending.append((update_id, payload))
        self._notify()
        return update_id

    def push_message(
        self,
        chat_id: int,
        text: str | None = None,
        *,
        user_id: int | None = None,
        username: str | None = "alice",
        first_name: str = "Alice",
        chat_type: str = "private",
        caption: str | None = None,
        photo: bytes | None = None,
        document: tuple[str, bytes] | None = None,
        voice: tuple[bytes, int] | None = None,
        reply_to_message_id: int | None = None,
        entities: list[dict[str, Any]] | None = None,
        topic: int | None = None,
    ) -> dict[str, Any]:
        """A user's message as Telegram delivers it (mentions and commands detected), queued
        as an update and stored so the bot can reply to it; returns the Message object. In a
        forum `topic` (the id of its first message) it is a topic message."""
        user: dict[str, Any] = {
            "id": user_id if user_id is not None else abs(chat_id),
            "is_bot": False,
            "first_name": first_name,
        }
        if username:
            user["username"] = username
        message: dict[str, Any] = {
            "message_id": self.state.next_message_id(chat_id),
            "from": user,
            "chat": self.state.chat(chat_id, chat_type, user),
            "date": int(time.time()),
        }
        body, key = (text, "text") if text is not None else (caption, "caption")
        if body is not None:
            message[key] = body
            found = entities if entities is not None else detect_entities(body)
            if found:
                message["entities" if key == "text" else "caption_entities"] = found
        if photo is not None:
            message["photo"] = self._photo_sizes(self.state.add_file(photo, "photos"))
        if document is not None:
            name, data = document
            stored = self.state.add_file(data, "documents", file_name=name)
            stored.extra = {"file_name": name}
            message["document"] = stored.as_file()
        if voice is not None:
            data, duration = voice
            stored = self.state.add_file(data, "voice", suffix=".oga")
            message["voice"] = {**stored.as_file(), "duration": duration, "mime_type": "audio/ogg"}
        if topic is not None:
            message["message_thread_id"] = topic
            message["is_topic_message"] = True
        replied = reply_to_message_id if reply_to_message_id is not None else topic
        if replied is not None and (chat_id, replied) in self.state.messages:
            # In a forum every message of a topic replies to the topic's first one.
            message["reply_to_message"] = self.state.messages[(chat_id, replied)]
        self.state.messages[(chat_id, message["message_id"])] = message
        self.push_update({"message": message})
        return message

    def push_edit(self, chat_id: int, message_id: int, text: str, *, edit_date: int) -> int:
        """The user's edit of their message `message_id` to `text`, as Telegram delivers it
        (an `edited_message` update); the update's id."""
        message = dict(self.state.messages[(chat_id, message_id)])
        message["text"] = text
        message.pop("entities", None)
        found = detect_entities(text)
        if found:
            message["entities"] = found
        message["edit_date"] = edit_date
        self.state.messages[(chat_id, message_id)] = message
        return self.push_update({"edited_message": message})

    def push_tap(
        self,
        chat_id: int,
        message_id: int,
        data: str,
        *,
        user_id: int,
        query_id: str | None = None,
        as_shown: dict[str, Any] | None = None,
    ) -> str:
        """A user's tap on a button of the bot's message, as Telegram delivers it (a
        `callback_query` update carrying the message with its keyboard); the query's id.
        `as_shown`: the message as an app that has not caught up still shows it (a keyboard
        since taken off)."""
        user = {"id": user_id, "is_bot": False, "first_name": "Alice", "username": "alice"}
        query_id = query_id or f"{user_id}{next(self.state.update_ids)}"
        self.state.callback_queries.setdefault(query_id, 0)
        # As the message was when tapped: a redelivered update still carries its keyboard.
        message = copy.deepcopy(as_shown or self.state.messages[(chat_id, message_id)])
        self.push_update(
            {
                "callback_query": {
                    "id": query_id,
                    "from": user,
                    "message": message,
                    "chat_instance": f"ci{chat_id}",
                    "data": data,
                }
            }
        )
        return query_id

    def push_reaction(
        self,
        chat_id: int,
        message_id: int,
        emoji: str,
        *,
        user_id: int,
        old: tuple[str, ...] = (),
        update_id: int | None = None,
    ) -> int:
        """A user's reaction to a message, as the Bot API delivers it (a `message_reaction`
        update: the reactions before and after); the update's id."""
        user = {"id": user_id, "is_bot": False, "first_name": "Alice", "username": "alice"}
        kinds = [{"type": "emoji", "emoji": each} for each in old]
        update: dict[str, Any] = {
            "message_reaction": {
                "chat": self.state.chat(chat_id, None, user),
                "message_id": message_id,
                "user": user,
                "date": int(time.time()),
                "old_reaction": kinds,
                "new_reaction": [*kinds, {"type": "emoji", "emoji": emoji}],
            }
        }
        if update_id is not None:
            update["update_id"] = update_id
        return self.push_update(update)

    @staticmethod
    def _photo_sizes(stored: StoredFile) -> list[dict[str, Any]]:
        small = {**stored.as_file(), "width": 90, "height": 90}
        small["file_id"] += "-small"
        return [small, {**stored.as_file(), "width": 800, "height": 600}]

    def drop_connections(self) -> int:
        """Abort every long poll in progress, as a broken network would; returns how many."""
        dropped = len(self._long_polls)
        for request in list(self._long_polls.values()):
            if request.transport is not None:
                request.transport.close()
        self._drops += 1
        self._notify()
        return dropped

    # Queries

    def calls(self, method: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method.lower() == method.lower()]

    async def wait_for_calls(
        self,
        method: str,
        count: int = 1,
        *,
        timeout_s: float = 10.0,
        where: Callable[[RecordedRequest], bool] | None = None,
    ) -> list[RecordedRequest]:
        """The first `count` calls of `method` (that match `where`), once they have come."""

        def matching() -> list[RecordedRequest]:
            return [r for r in self.calls(method) if where is None or where(r)]

        await self.wait_until(lambda: len(matching()) >= count, timeout_s=timeout_s)
        return matching()[:count]

    async def wait_until(self, condition: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
        """Wait at most `timeout_s` for `condition()`, re-checked at every request and change."""
        async with asyncio.timeout(timeout_s):
            while not condition():
                await self._change.wait()

    def bot_messages(self, chat_id: int) -> list[dict[str, Any]]:
        """What the bot sent to a chat, as it stands now (after edits and deletions)."""
        return self.state.bot_messages(chat_id)

    @property
    def pending_update_ids(self) -> list[int]:
        return [update_id for update_id, _ in self.state.pending]

    @property
    def delivered(self) -> dict[int, int]:
        """How many getUpdates answers carried each update id."""
        return self.state.delivered

    @property
    def long_polls_waiting(self) -> int:
        return len(self._long_polls)

    def _notify(self) -> None:
        # A pulse: whoever waits on the current event wakes; later waiters get a fresh one.
        self._change.set()
        self._change = asyncio.Event()

    # HTTP

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        record = RecordedRequest(request.match_info["method"], {}, {}, time.monotonic())
        self.requests.append(record)
        try:
            record.params, record.files = await read_params(request)
            self._notify()
            if (release := self._held.get(record.method.lower())) is not None:
                await release.wait()
            result = await self._dispatch(request.match_info["token"], record, request)
        except ApiError as exc:
            record.status = exc.status
            return web.json_response(exc.body(), status=exc.status)
        finally:
            self._notify()
        if isinstance(result, web.Response):
            record.status = result.status
            return result
        return web.json_response({"ok": True, "result": result})

    async def _dispatch(self, token: str, record: RecordedRequest, request: web.Request) -> Any:
        if token != self.token:
            if _TOKEN_SHAPE.fullmatch(token):
                raise ApiError(401, "Unauthorized")
            raise ApiError(404, "Not Found")
        if self.flood is not None:
            chat_id = record.params.get("chat_id")
            retry_after = self.flood.check(
                record.method, None if chat_id is None else str(chat_id), record.at
            )
            if retry_after is not None:
                raise ApiError(429, f"Too Many Requests: retry after {retry_after}", retry_after)
        injected = self._take_injected(record.method)
        if injected is not None:
            if injected.error is not None:
                raise injected.error
            return web.Response(
                body=injected.body, status=injected.status, content_type="application/json"
            )
        if record.method.lower() == "getupdates":
            return await self._get_updates(record.params, request)
        handler = self._methods.lookup(record.method)
        if handler is None:
            raise ApiError(404, "Not Found")
        return handler(record.params, record.files)

    def _take_injected(self, method: str) -> _Injected | None:
        queue = self._injected.get(method.lower())
        if not queue:
            return None
        injected = queue[0]
        injected.remaining -= 1
        if injected.remaining <= 0:
            queue.pop(0)
        return injected

    async def _get_updates(self, params: dict[str, Any], request: web.Request) -> Any:
        state = self.state
        if state.webhook is not None:
            raise ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        offset, limit = int_param(params.get("offset")), int_param(params.get("limit"), 100)
        if offset > 0:  # confirms every update below the offset
            state.pending = [(uid, item) for uid, item in state.pending if uid >= offset]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(params.get("timeout") or 0)
        drops = self._drops
        self._long_polls[id(request)] = request
        self._notify()
        try:
            while not state.pending and self._drops == drops:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._change.wait(), remaining)
        finally:
            self._long_polls.pop(id(request), None)
        transport = request.transport
        if self._drops != drops or transport is None or transport.is_closing():
            if transport is not None:
                transport.close()
            return web.Response(status=500)  # the client is gone: nothing is delivered
        batch = state.pending[:limit]
        for update_id, _ in batch:
            state.delivered[update_id] = state.delivered.get(update_id, 0) + 1
        once = {update_id for update_id, item in batch if not isinstance(item, dict)}
        state.pending = [(uid, item) for uid, item in state.pending if uid not in once]
        return [item for _, item in batch]

    async def _handle_file(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        self.requests.append(RecordedRequest("file", {"path": path}, {}, time.monotonic()))
        self._notify()
        if request.match_info["token"] != self.token:
            return web.Response(status=401, text="Unauthorized")
        stored = self.state.file_at(path)
        if stored is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=stored.data, content_type="application/octet-stream")

    async def _handle_control_update(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if isinstance(body, dict) and "raw" in body:
            return web.json_response({"update_id": self.push_raw_update(body["raw"])})
        return web.json_response({"update_id": self.push_update(body)})

    async def _handle_control_requests(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(
            [
                {"method": r.method, "params": r.params, "at": r.at, "status": r.status}
                for r in self.requests
            ]
        )
