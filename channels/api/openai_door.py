"""The OpenAI-compatible door of the API channel: `POST /v1/chat/completions` and
`GET /v1/models`, so that OpenAI's clients (the `openai` SDK, Open WebUI, editors) talk to the bot.

`model` names one of the profile's agents, which answers whatever the routes say (`bus.AGENT`);
the chat is the request's `user`, else the `X-Octos-Chat-Id` header, else one chat per bearer
token. Only the last user message is the turn: the gateway's session is the history, and the
request's earlier messages only seed a session that is still empty (`bus.SEED`). The message
goes through the same intake, journal and reply matching as `/v1/chat` (`ApiChannel.submit`);
answers and errors are in OpenAI's shapes (`{"error": {"message", "type", "code"}}`), a streamed
one as `chat.completion.chunk` deltas of the reply's snapshots, ending `data: [DONE]`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from aiohttp import web

from bus import AGENT, SEED
from channels.api.replies import PendingReply, ReplyEvent
from channels.api.requests import (
    MAX_CHAT_ID_CHARS,
    BadRequest,
    Refusal,
    read_json_body,
    valid_text,
)
from config import ApiChannelConfig

log = structlog.get_logger(__name__)

#: The paths whose errors are in OpenAI's shape (the bearer check answers them so too).
OPENAI_PATHS = frozenset({"/v1/chat/completions", "/v1/models"})
CHAT_ID_HEADER = "X-Octos-Chat-Id"


_SEED_ROLES = frozenset({"system", "user", "assistant"})


class OpenAIError(Exception):
    """Answered with `status` and `{"error": {"message", "type", "code"}}`."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.code = code

    def response(self, headers: dict[str, str] | None = None) -> web.Response:
        body = {"error": {"message": str(self), "type": self.kind, "code": self.code}}
        return web.json_response(body, status=self.status, headers=headers)


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    model: str
    #: The text of the last user message: the turn.
    content: str
    #: The messages before it, as `{"role", "content"}` (`bus.SEED`).
    earlier: list[dict[str, str]]
    user: str | None
    stream: bool
    include_usage: bool


def parse_completion_request(body: Any) -> CompletionRequest:
    if not isinstance(body, dict):
        raise OpenAIError(f"body must be a JSON object, got {type(body).__name__}")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError("'model' is required: the name of one of the bot's agents (/v1/models)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError("'messages' must be a non-empty list")
    read = [_message_text(index, message) for index, message in enumerate(messages)]
    if read[-1][0] != "user":
        raise OpenAIError("the last message must be the user's: it is what the bot answers")
    content = read[-1][1]
    if not content.strip():
        raise OpenAIError("the last user message is empty")
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or not 0 < len(user) <= MAX_CHAT_ID_CHARS):
        raise OpenAIError(f"'user' must be a string of 1 to {MAX_CHAT_ID_CHARS} characters")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise OpenAIError("'stream' must be true or false")
    options = body.get("stream_options") or {}
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    earlier = [{"role": role, "content": text} for role, text in read[:-1] if role in _SEED_ROLES]
    return CompletionRequest(model, content, earlier, user, stream, include_usage)


def _message_text(index: int, message: Any) -> tuple[str, str]:
    """A message's role and text: a string, or the text parts of a list of parts."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise OpenAIError(f"messages[{index}] must be an object with a 'role'")
    content = message.get("content")
    if content is None:
        return message["role"], ""
    if isinstance(content, list):
        parts = [
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        content = "\n".join(str(part) for part in parts)
    if not isinstance(content, str):
        raise OpenAIError(f"messages[{index}].content must be a string or a list of parts")
    try:
        return message["role"], valid_text(f"messages[{index}].content", content)
    except BadRequest as error:
        raise OpenAIError(str(error)) from None


def openai_usage(usage: Any) -> dict[str, int]:
    """OpenAI's `usage` from the turn's token counts (`bus.TokenUsage` as a dict)."""
    counts = usage if isinstance(usage, dict) else {}
    prompt = int(counts.get("input_tokens", 0) or 0)
    completion = int(counts.get("output_tokens", 0) or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


_REFUSALS = {
    403: ("permission_error", "chat_not_allowed"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    503: ("server_error", "overloaded"),
}


def _refused(refusal: Refusal) -> web.Response:
    kind, code = _REFUSALS.get(refusal.status, ("server_error", None))
    retry_after = refusal.retry_after()
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return OpenAIError(refusal.message, refusal.status, kind, code).response(headers)


@dataclass(frozen=True, slots=True)
class _Completion:
    """One completion's identity, which its whole body and each of its chunks start with."""

    id: str
    model: str
    created: int

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def body(self, text: str, usage: dict[str, int]) -> dict[str, Any]:
        """A whole `chat.completion`."""
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return {**self._head("chat.completion"), "choices": [choice], "usage": usage}

    def chunk(self, delta: dict[str, str], finish_reason: str | None = None) -> bytes:
        """One `chat.completion.chunk` of a streamed completion, as a server-sent event."""
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return _data({**self._head("chat.completion.chunk"), "choices": [choice]})

    def usage_chunk(self, usage: dict[str, int]) -> bytes:
        """The chunk that ends a stream with the usage, where the request asked for it."""
        return _data({**self._head("chat.completion.chunk"), "choices": [], "usage": usage})


def _data(body: object) -> bytes:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


def _delta(shown: str, text: str) -> str:
    """What `text` adds to what was shown; a snapshot that rewrote the start (rare) adds what
    follows the part both share."""
    if text.startswith(shown):
        return text[len(shown) :]
    common, limit = 0, min(len(shown), len(text))
    while common < limit and shown[common] == text[common]:
        common += 1
    return text[common:]


class ApiListener(Protocol):
    """What the door asks of the API channel, which owns the listener and the replies."""

    agent_names: tuple[str, ...]

    @property
    def profile(self) -> str: ...

    @property
    def config(self) -> ApiChannelConfig: ...

    async def submit(
        self, chat_id: str, content: str, message_id: str, metadata: dict[str, object] | None
    ) -> PendingReply | Refusal: ...

    def forget(self, pending: PendingReply) -> None: ...


class OpenAIDoor:
    """The two endpoints, over the API channel."""

    def __init__(self, channel: ApiListener) -> None:
        self._channel = channel

    async def models(self, _request: web.Request) -> web.Response:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": self._channel.profile}
            for name in self._channel.agent_names
        ]
        return web.json_response({"object": "list", "data": data})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        channel = self._channel
        try:
            body = await read_json_body(request, channel.config.max_body_bytes)
            completion = parse_completion_request(body)
            chat_id = _chat_id(request, completion.user)
        except BadRequest as error:
            return OpenAIError(str(error), error.status).response()
        except OpenAIError as error:
            return error.response()
        if completion.model not in channel.agent_names:
            return OpenAIError(
                f"The model {completion.model!r} does not exist; this bot's agents are "
                f"{', '.join(channel.agent_names)} (GET /v1/models)",
                404,
                "invalid_request_error",
                "model_not_found",
            ).response()
        message_id = uuid.uuid4().hex
        metadata: dict[str, object] = {AGENT: completion.model}
        if completion.earlier:
            metadata[SEED] = completion.earlier
        submitted = await channel.submit(chat_id, completion.content, message_id, metadata)
        if isinstance(submitted, Refusal):
            return _refused(submitted)
        shape = _Completion(f"chatcmpl-{message_id}", completion.model, int(time.time()))
        try:
            if completion.stream:
                return await self._stream(request, submitted, shape, completion.include_usage)
            return await self._whole(submitted, shape)
        finally:
            channel.forget(submitted)

    async def _whole(self, pending: PendingReply, shape: _Completion) -> web.Response:
        timeout_s = self._channel.config.reply_timeout_s
        event = await pending.final(timeout_s)
        if event is None:
            return OpenAIError(_late(timeout_s), 504, "server_error", "timeout").response()
        if event.kind == "error":
            return OpenAIError(event.text, 500, "server_error", "turn_failed").response()
        return web.json_response(shape.body(event.text, openai_usage(event.usage)))

    async def _stream(
        self, request: web.Request, pending: PendingReply, shape: _Completion, with_usage: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "no-cache"})
        response.content_type = "text/event-stream"
        config = self._channel.config
        shown = ""
        try:
            await response.prepare(request)
            await response.write(shape.chunk({"role": "assistant", "content": ""}))
            try:
                async with asyncio.timeout(config.reply_timeout_s):
                    event = await pending.events.get()
                    while event.kind == "snapshot":
                        delta = _delta(shown, event.text)
                        shown = event.text
                        if delta:
                            await response.write(shape.chunk({"content": delta}))
                        event = await pending.events.get()
            except TimeoutError:
                log.warning(
                    "api.reply_timeout", chat=pending.key[0], timeout_s=config.reply_timeout_s
                )
                event = ReplyEvent("error", _late(config.reply_timeout_s))
            async with asyncio.timeout(config.limits.body_timeout_s):
                await response.write(_stream_end(shape, shown, event, with_usage))
                await response.write_eof()
        except (ConnectionResetError, ConnectionError, TimeoutError):
            # The client left (or stopped reading); the turn still completes and is stored.
            log.info("api.client_disconnected_mid_stream")
        return response


def _stream_end(shape: _Completion, shown: str, event: ReplyEvent, with_usage: bool) -> bytes:
    """The rest of a streamed completion: the last delta and the stop (or the error), the
    usage when asked for, `[DONE]`."""
    if event.kind == "error":
        error = {"message": event.text, "type": "server_error", "code": "turn_failed"}
        return _data({"error": error}) + b"data: [DONE]\n\n"
    out = b""
    delta = _delta(shown, event.text)
    if delta:
        out += shape.chunk({"content": delta})
    out += shape.chunk({}, "stop")
    if with_usage:
        out += shape.usage_chunk(openai_usage(event.usage))
    return out + b"data: [DONE]\n\n"


def _chat_id(request: web.Request, user: str | None) -> str:
    """The request's `user`, else its `X-Octos-Chat-Id`, else one chat per bearer token."""
    if user:
        return user
    header = request.headers.get(CHAT_ID_HEADER, "").strip()
    if header:
        if len(header) > MAX_CHAT_ID_CHARS:
            raise OpenAIError(f"{CHAT_ID_HEADER} has more than {MAX_CHAT_ID_CHARS} characters")
        return header
    _scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if not token:
        return "openai"
    # The token itself must not become a chat id that logs and session files show.
    return "openai-" + hashlib.sha256(token.encode()).hexdigest()[:16]


def _late(timeout_s: float) -> str:
    return (
        f"no reply within {timeout_s:g} s; the message was received and its reply will be "
        "in the session"
    )
