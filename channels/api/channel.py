"""The HTTP API channel: `POST /v1/chat` (JSON or server-sent events), session reading, and a
small web chat page at `/`.

Every request is answered within `reply_timeout_s`: a reply, a JSON error (400 for input that
cannot be served, 403 at once for a chat id the allow list refuses, with the notice a refused
sender gets, 429/503 with Retry-After when the gateway's backlog is full, 504 when the reply is
late), and a stream always ends with a `done` or an `error` event. The listener runs under a
`ConnectionGuard` (timeouts, connection cap) and checks `Host` and `Origin` (DNS rebinding,
cross-site posts).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import tempfile
import uuid
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from bus import (
    CALLBACK,
    Attachment,
    InboundMessage,
    InboundRefused,
    InboundSender,
    Message,
    OutboundMessage,
    PipeClosed,
    SenderRefused,
)
from channels.api.openai_door import OPENAI_PATHS, OpenAIDoor, OpenAIError
from channels.api.replies import PendingReply, ReplyEvent, ReplyRouter
from channels.api.requests import (
    BadRequest,
    Refusal,
    UploadedFile,
    error_response,
    parse_chat_request,
    read_json_body,
)
from channels.base import ChatHistory, HistoryUnavailable
from channels.errors import ChannelError, FatalChannelError
from channels.health import ChannelHealth
from channels.lifecycle.run_state import RunStateChannel
from channels.media_files import MediaStore, safe_file_name
from channels.media_info import MediaInfo, describe, kind_for, mime_for, too_large_reason
from channels.media_links import REPLY_LINK_TTL_S, link_to
from channels.split.limits import PLATFORM_LIMITS
from channels.web.guard import ConnectionGuard, GuardedSite, guarded_runner
from channels.web.names import HostCheck, listener_names, origin_allowed
from config import ApiChannelConfig

log = structlog.get_logger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
#: The project's one icon. The status page (`gateway.daemon.status_page`) serves this file too:
#: it is kept here because gateway may import channels, and channels may not import gateway.
FAVICON = STATIC_DIR / "favicon.svg"
STATIC_FILES = {
    "/": "index.html",
    "/static/app.js": "app.js",
    "/static/style.css": "style.css",
    "/static/markdown-it.min.js": "markdown-it.min.js",
    "/static/favicon.svg": FAVICON.name,
    "/favicon.ico": FAVICON.name,
}
CONTENT_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}
#: How long a non-streamed request waits for its reply before answering 504.
REPLY_TIMEOUT_S = 600.0


class ApiChannel(RunStateChannel):
    name = "api"
    limit = PLATFORM_LIMITS["api"]
    edit_interval_s = 0.1
    #: An edit is a server-sent event on the request's own connection: no platform to pace.
    edits_rate_limited = False
    replies_to_retries = True
    #: A refused chat id is told at once, in the 403 that answers its request: no reply comes.
    answers_refusals = True
    send_with_id_sends_whole = False  # it opens a streamed reply to the waiting request
    #: A reply's files are in its JSON answer, as links (`attachments`).
    sends_attachments_with_text = True
    #: A reply's buttons go in its JSON (`buttons`, `message_id`); a request's `callback` taps.
    buttons_shown = "in_send"
    #: The profile's agent type, which the empty page names (GET /v1/info).
    agent: str = ""
    #: The names of the profile's agents, which `GET /v1/models` lists.
    agent_names: tuple[str, ...] = ("default",)

    def __init__(
        self,
        config: ApiChannelConfig,
        profile: str,
        history: ChatHistory | None,
        *,
        data_dir: Path | None = None,
    ) -> None:
        """`data_dir`: where the files users send are kept (a temporary folder by default)."""
        self._config = config
        self._data_dir = data_dir or Path(tempfile.gettempdir()) / "octos-api"
        self._profile = profile
        self._history = history
        self._token = config.auth_token.get_secret_value() if config.auth_token else None
        self._replies = ReplyRouter()
        self._guard = ConnectionGuard(config.limits, "api", config.max_body_bytes)
        self._hosts = HostCheck(
            listener_names(config.host, config.allowed_hosts), "the api channel's allowed_hosts"
        )
        self._inbound: InboundSender | None = None
        self._runner: web.AppRunner | None = None
        self._static: dict[str, bytes] = {}
        #: The port the listener is bound to, once it accepts connections (`wait_receiving`).
        self.bound_port: int | None = None
        # Started, or about to be, but not bound yet: a load balancer must wait, not give up.
        super().__init__(not_receiving=ChannelHealth.starting("opening its listener"))

    def supports_edit(self) -> bool:
        return True

    async def start(self, inbound: InboundSender) -> None:
        try:
            await self._run_state.run(self._listen(inbound))
        finally:
            await self._close_listener()

    async def _listen(self, inbound: InboundSender) -> None:
        """Serve the API until `stop()`; a port that is taken is fatal."""
        self._inbound = inbound
        self._static = await asyncio.to_thread(_read_static_files)
        self._runner = guarded_runner(self._build_app(), self._guard)
        await self._runner.setup()
        site = GuardedSite(self._runner, self._config.host, self._config.port, self._guard)
        try:
            await site.start()
        except OSError as error:
            raise FatalChannelError(
                f"cannot listen on {self._config.host}:{self._config.port}: {error}",
                channel="api",
                suggestion="choose a free port in the api channel's `port`",
            ) from error
        self.bound_port = self._runner.addresses[0][1]
        self._run_state.receiving.set()
        log.info("api.web_chat_ready", url=f"http://{self._config.host}:{self.bound_port}/")
        await self._run_state.stopping.wait()

    async def stop(self) -> None:
        # The waiting requests are answered and the listener closed first: `start()` ends
        # once it has nothing left to wait for.
        self._run_state.stopping.set()
        await self._close_listener()
        await super().stop()

    async def _close_listener(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            self._replies.fail_all("the server is shutting down")
            await runner.cleanup()

    # Outbound: the channel manager hands replies here; they go to the waiting requests.
    async def send(self, message: OutboundMessage) -> None:
        self._require_running()
        files = tuple(self._described(attachment) for attachment in message.attachments)
        self._replies.final(message, files)

    def _described(self, attachment: Attachment) -> dict[str, object]:
        """A reply's file as the client sees it: a link to it, never the local path."""
        return {
            "kind": attachment.kind,
            "mime": attachment.mime,
            "name": attachment.name,
            "size": attachment.size,
            "url": link_to(attachment, self.media_links),
        }

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        self._require_running()
        return self._replies.open_stream(message)

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        self._require_running()
        self._replies.snapshot(message_id, content)

    def stream_ending(self, message: OutboundMessage) -> None:
        self._replies.ending(message)

    async def finish_stream(self, chat_id: str, message_id: str, content: str) -> None:
        self._require_running()
        self._replies.finish(message_id, content)

    def _require_running(self) -> None:
        # A reply for a closed server has no request left to take it: say so, do not drop it.
        if self._runner is None:
            raise ChannelError("the API server is not running", channel="api")

    # Inbound HTTP.
    def _build_app(self) -> web.Application:
        app = web.Application(
            middlewares=[self._guard.middleware, self._hosts.middleware, self._cors, self._auth],
            client_max_size=self._config.max_body_bytes,
        )
        app.router.add_post("/v1/chat", self._chat)
        app.router.add_get("/v1/sessions", self._sessions)
        app.router.add_get("/v1/sessions/{chat_id}/messages", self._messages)
        app.router.add_get("/v1/info", self._info)
        door = OpenAIDoor(self)
        app.router.add_post("/v1/chat/completions", door.completions)
        app.router.add_get("/v1/models", door.models)
        for path in STATIC_FILES:
            app.router.add_get(path, self._static_file)
        return app

    @web.middleware
    async def _cors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        allowed = self._config.cors_origins
        if not origin_allowed(request, allowed):
            log.info("api.origin_refused", origin=repr(origin)[:100])
            return error_response(
                403,
                "this origin may not call the API; add it to the api channel's cors_origins "
                "if it should",
            )
        allow_origin = origin if origin and ("*" in allowed or origin in allowed) else None
        if request.method == "OPTIONS" and allow_origin:
            response: web.StreamResponse = web.Response(status=204)
        else:
            response = await handler(request)
        if allow_origin:
            response.headers["Access-Control-Allow-Origin"] = allow_origin
            response.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
            response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
        return response

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # The page itself is public; it asks for the token and sends it with every API call.
        if self._token is None or request.path in STATIC_FILES or request.method == "OPTIONS":
            return await handler(request)
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if (
            scheme.lower() != "bearer"
            or not presented.isascii()
            or not hmac.compare_digest(presented.strip().encode(), self._token.encode())
        ):
            reason = "missing or wrong bearer token"
            response = (
                OpenAIError(reason, 401, "invalid_request_error", "invalid_api_key").response()
                if request.path in OPENAI_PATHS
                else error_response(401, reason)
            )
            response.headers["WWW-Authenticate"] = 'Bearer realm="octos-gateway"'
            return response
        return await handler(request)

    async def _static_file(self, request: web.Request) -> web.Response:
        name = STATIC_FILES[request.path]
        content_type = CONTENT_TYPES[name[name.rindex(".") :]]
        return web.Response(body=self._static[name], content_type=content_type, charset="utf-8")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            chat = parse_chat_request(await read_json_body(request, self._config.max_body_bytes))
        except BadRequest as error:
            return error_response(error.status, str(error))
        message_id = chat.client_message_id or uuid.uuid4().hex
        tap: dict[str, object] | None = None if chat.callback is None else {CALLBACK: chat.callback}
        submitted = await self.submit(
            chat.chat_id, chat.content, message_id, tap, attachments=chat.attachments
        )
        if isinstance(submitted, Refusal):
            return submitted.as_error()
        try:
            if chat.stream:
                return await self._stream(request, submitted)
            return await self._wait_whole(chat.chat_id, submitted)
        finally:
            self._replies.forget(submitted)

    async def submit(
        self,
        chat_id: str,
        content: str,
        message_id: str,
        metadata: dict[str, object] | None = None,
        *,
        attachments: Sequence[UploadedFile] = (),
    ) -> PendingReply | Refusal:
        """The message handed to the gateway (durable once this returns), and the request's
        wait for its reply; or why the gateway did not take it. `/v1/chat` and the OpenAI door
        both go through here."""
        if self._inbound is None:
            return Refusal(503, "the channel is not running")
        inbound = InboundMessage(
            channel="api",
            sender_id=chat_id,
            chat_id=chat_id,
            content=content,
            message_id=message_id,
            metadata=metadata or {},
        )
        if attachments:
            inbound = await self._with_files(inbound, attachments)
        pending = self._replies.wait_for(chat_id, message_id)
        try:
            await self._inbound.send(inbound)
        except InboundRefused as error:
            self._replies.forget(pending)
            return Refusal(error.http_status, error.message, error.retry_after_s)
        except SenderRefused as refused:
            self._replies.forget(pending)
            return Refusal(403, refused.notice)
        except PipeClosed:
            self._replies.forget(pending)
            return Refusal(503, "the gateway is shutting down; retry shortly")
        return pending

    def forget(self, pending: PendingReply) -> None:
        """The request is answered (or gone): its wait ends."""
        self._replies.forget(pending)

    @property
    def profile(self) -> str:
        return self._profile

    @property
    def config(self) -> ApiChannelConfig:
        return self._config

    async def _with_files(
        self, inbound: InboundMessage, files: Sequence[UploadedFile]
    ) -> InboundMessage:
        """`inbound` with its files saved for the agent (those within `max_media_bytes`; a
        larger one is named in the text)."""
        store = MediaStore(self._data_dir, self.name, max_bytes=self.max_media_bytes)
        intake = store.intake(inbound, self.max_media_bytes)
        for number, file in enumerate(files, start=1):
            name, size = safe_file_name(file.name), len(file.data)
            if not store.admits(size, message_id=inbound.message_id):
                intake.skip(too_large_reason(store.max_bytes), name=name, mime=file.mime, size=size)
                continue
            target = store.path_for(inbound.chat_id, f"{inbound.message_id}-{number}-{name}")
            await intake.take(partial(store.save, target, file.data), name=name, mime=file.mime)
        return intake.message()

    def _default_session(self, chat_id: str) -> str:
        return f"{self._profile}:api:{chat_id}"

    async def _wait_whole(self, chat_id: str, pending: PendingReply) -> web.Response:
        timeout_s = self._config.reply_timeout_s
        event = await pending.final(timeout_s)
        if event is None:
            return error_response(504, _late(timeout_s))
        body: dict[str, object] = {
            "reply": event.text,
            "chat_id": chat_id,
            "session": event.session or self._default_session(chat_id),
        }
        if event.attachments:
            body["attachments"] = list(event.attachments)
        if event.buttons:
            body["buttons"] = event.buttons
            body["message_id"] = event.message_id
        if event.kind == "error":
            # The turn failed (the agent, the session): its apology is the reason.
            body["error"] = event.text
            return web.json_response(body, status=500)
        return web.json_response(body)

    async def _stream(self, request: web.Request, pending: PendingReply) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "no-cache"})
        response.content_type = "text/event-stream"
        timeout_s = self._config.reply_timeout_s
        try:
            await response.prepare(request)
            try:
                async with asyncio.timeout(timeout_s):
                    event = await _next_final_or_snapshot(pending, response)
            except TimeoutError:
                log.warning("api.reply_timeout", chat=pending.key[0], timeout_s=timeout_s)
                event = ReplyEvent("error", _late(timeout_s))
            async with asyncio.timeout(self._config.limits.body_timeout_s):
                await response.write(_sse(event))
                await response.write_eof()
        except (ConnectionResetError, ConnectionError, TimeoutError):
            # The client left (or stopped reading); the turn still completes and is stored.
            log.info("api.client_disconnected_mid_stream")
        return response

    async def _sessions(self, _request: web.Request) -> web.Response:
        if self._history is None:
            return error_response(503, "sessions are not available")
        return web.json_response({"sessions": await self._history.sessions("api")})

    async def _info(self, _request: web.Request) -> web.Response:
        return web.json_response({"profile": self._profile, "agent": self.agent})

    async def _messages(self, request: web.Request) -> web.Response:
        if self._history is None:
            return error_response(503, "sessions are not available")
        chat_id = request.match_info["chat_id"]
        try:
            messages = await self._history.messages("api", chat_id)
        except HistoryUnavailable as error:
            return error_response(409, str(error))
        shown = [await self._shown(message) for message in messages]
        return web.json_response({"chat_id": chat_id, "messages": shown})

    def _link(self, media: MediaInfo) -> str | None:
        if self.media_links is None:
            return None
        try:
            return self.media_links.url_for(media, REPLY_LINK_TTL_S)
        except ValueError:
            return None  # outside the data directory the links serve

    async def _shown(self, message: Message) -> dict[str, object]:
        """A session message as the page shows it: its files as links, not local paths."""
        fields = message.to_dict()
        media = fields.pop("media", None)
        if media:
            files: list[dict[str, object]] = []
            for path in media:
                try:
                    info = await asyncio.to_thread(describe, path)
                except OSError:
                    files.append({"kind": kind_for(mime_for(path)), "name": Path(path).name})
                    continue
                files.append({"kind": info.kind, "name": info.name, "url": self._link(info)})
            fields["attachments"] = files
        return fields


async def _next_final_or_snapshot(
    pending: PendingReply, response: web.StreamResponse
) -> ReplyEvent:
    """Write snapshots as they come; return the final event (done or error) unwritten."""
    while True:
        event = await pending.events.get()
        if event.kind != "snapshot":
            return event
        await response.write(_sse(event))


def _late(timeout_s: float) -> str:
    return (
        f"no reply within {timeout_s:g} s; the message was received and its reply will be "
        "in the session (GET /v1/sessions/{chat_id}/messages)"
    )


def _sse(event: ReplyEvent) -> bytes:
    fields: dict[str, object] = {"text": event.text}
    if event.attachments:
        fields["attachments"] = list(event.attachments)
    if event.buttons:
        fields["buttons"] = event.buttons
        fields["message_id"] = event.message_id
    data = json.dumps(fields, ensure_ascii=False)
    return f"event: {event.kind}\ndata: {data}\n\n".encode()


def _read_static_files() -> dict[str, bytes]:
    return {name: (STATIC_DIR / name).read_bytes() for name in STATIC_FILES.values()}
