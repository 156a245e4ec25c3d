"""A fake webhook agent endpoint: records each POSTed turn and answers as scripted.

It answers in each reply format the webhook agent accepts: a JSON `{"reply", "usage",
"attachments"}`, a `text/event-stream` of `data: {"text": delta}` events (then one
`{"attachments": [...]}` event when scripted) ended by `data: [DONE]`, NDJSON lines, or plain
text; or with an error status. It also serves files a reply names (`serve`), at `files_url`.

    async with FakeWebhook() as fake:
        fake.script(ScriptedReply(mode="sse", text="Hi there"))
        ... WebhookAgent(WebhookAgentConfig(url=fake.url)) ...
        fake.requests[0].json["message"]["content"]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from tests.fakes import ScriptedFake, word_by_word

DEFAULT_REPLY = "Hello from the webhook."
HOOK_PATH = "/hook"
FILES_PATH = "/files"

ReplyMode = Literal["json", "sse", "ndjson", "text"]


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    """What the fake does with one request."""

    mode: ReplyMode = "json"
    text: str = DEFAULT_REPLY
    #: How a streamed text is cut into events; by default word by word.
    deltas: tuple[str, ...] | None = None
    usage: dict[str, int] | None = None
    #: A status other than 200 answers with `error_body` as text/plain.
    status: int = 200
    error_body: str = "scripted failure"
    #: Streamed modes: wait for `StreamControl.release` after this many events.
    hold_after: int | None = None
    #: Streamed modes: close the connection abruptly after this many events.
    disconnect_after: int | None = None
    #: SSE: leave out the final `data: [DONE]`.
    omit_done: bool = False
    #: Rows of buttons (`{"text", "data"|"url"}`) with the reply: in the JSON, or in the
    #: last stream event.
    buttons: list[list[dict[str, str]]] | None = None
    #: The bot's reaction to the user's message.
    reaction: str | None = None
    #: Answer (and record the request) only once the test sets `control.release`: an agent as
    #: slow as the test wants, with no clock in it.
    held: bool = False
    #: The reply's files, as the webhook protocol names them (`url` or `data`, `mime`, `name`).
    attachments: tuple[dict[str, str], ...] = ()

    def pieces(self) -> tuple[str, ...]:
        return self.deltas if self.deltas is not None else word_by_word(self.text)


@dataclass(frozen=True, slots=True)
class RecordedPost:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


_STREAM_TYPES = {"sse": "text/event-stream", "ndjson": "application/x-ndjson"}


#: The two buttons of a reply that asks to approve a refund, as the agent writes them.
APPROVE_OR_DENY: list[list[dict[str, str]]] = [
    [{"text": "Approve", "data": "refund:42:yes"}, {"text": "Deny", "data": "refund:42:no"}],
]


class FakeWebhook(ScriptedFake[ScriptedReply]):
    """The fake endpoint at `url`; requests take scripted replies in order, then `default`."""

    def __init__(self) -> None:
        self.requests: list[RecordedPost] = []
        #: name -> (status, content type, body) of the files `serve` offers.
        self._files: dict[str, tuple[int, str, bytes]] = {}
        #: Each file name fetched, in order.
        self.fetched: list[str] = []
        app = web.Application()
        app.router.add_post(HOOK_PATH, self._hook)
        app.router.add_get(f"{FILES_PATH}/{{name}}", self._file)
        super().__init__(app, ScriptedReply())

    @property
    def url(self) -> str:
        return f"{self.origin}{HOOK_PATH}"

    def taps(self) -> list[dict[str, Any]]:
        """The `callback` of each button tap the agent was asked about, in order."""
        return [
            post.json["message"]["callback"]
            for post in self.requests
            if "callback" in post.json["message"]
        ]

    def reactions(self) -> list[tuple[str, dict[str, Any]]]:
        """The content and `reaction` of each user's reaction the agent was asked about."""
        return [
            (post.json["message"]["content"], post.json["message"]["reaction"])
            for post in self.requests
            if "reaction" in post.json["message"]
        ]

    def serve(self, name: str, body: bytes, content_type: str, status: int = 200) -> str:
        """Offer a file for a reply to name; its URL."""
        self._files[name] = (status, content_type, body)
        return f"{self.origin}{FILES_PATH}/{name}"

    async def _file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.fetched.append(name)
        status, content_type, body = self._files.get(name, (404, "text/plain", b"no such file"))
        return web.Response(status=status, body=body, content_type=content_type)

    async def _hook(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        script = self._next_script()
        if script.held:
            # Recorded once answered: a request whose client died while held never was.
            try:
                await self.control.hold()
            except BaseException:
                # Cancelled by aiohttp (handler_cancellation): the client left.
                self.control.client_disconnected.set()
                raise
            if request.transport is None or request.transport.is_closing():
                self.control.client_disconnected.set()
                return web.Response(status=499)
        self.requests.append(RecordedPost(dict(request.headers), body))
        if script.status != 200:
            return web.Response(status=script.status, text=script.error_body)
        if script.mode == "json":
            payload: dict[str, Any] = {"reply": script.text}
            if script.usage is not None:
                payload["usage"] = script.usage
            payload.update(_extras(script))
            return web.json_response(payload)
        if script.mode == "text":
            return web.Response(text=script.text)
        return await self._stream(request, script)

    async def _stream(self, request: web.Request, script: ScriptedReply) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": _STREAM_TYPES[script.mode]})
        await response.prepare(request)
        events: list[dict[str, Any]] = [{"text": piece} for piece in script.pieces()]
        if script.usage is not None:
            events.append({"usage": script.usage})
        if extras := _extras(script):
            events.append(extras)
        try:
            for sent, event in enumerate(events):
                if await self._cut_before(request, script, sent):
                    return response
                await response.write(_frame(script.mode, json.dumps(event)))
            if script.mode == "sse" and not script.omit_done:
                await response.write(_frame("sse", "[DONE]"))
            await response.write_eof()
        except BaseException:
            # Cancelled by aiohttp (handler_cancellation) or a failed write: the client left.
            self.control.client_disconnected.set()
            raise
        return response


def _extras(script: ScriptedReply) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    if script.buttons is not None:
        extras["buttons"] = script.buttons
    if script.reaction is not None:
        extras["reaction"] = script.reaction
    if script.attachments:
        extras["attachments"] = list(script.attachments)
    return extras


def _frame(mode: ReplyMode, data: str) -> bytes:
    return (f"data: {data}\n\n" if mode == "sse" else f"{data}\n").encode()
