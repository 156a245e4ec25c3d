"""A fake OpenAI-compatible `/v1/chat/completions` server, scriptable per request.

It speaks the wire format the official SDK reads: a streamed reply is `text/event-stream` with
`data: {chunk}\\n\\n` events (`object: chat.completion.chunk`, the text in
`choices[0].delta.content`, a last chunk with `finish_reason`, then, when the request asked for
`stream_options.include_usage`, a chunk with empty `choices` and the `usage`), ended by
`data: [DONE]`. Errors are OpenAI's `{"error": {"message", "type", "param", "code"}}` bodies.

    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.script(ScriptedCompletion(text="Hi there"))
        ... AsyncOpenAI(base_url=fake.base_url, api_key="sk-test") ...
        fake.requests[0].body["messages"]
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes import ScriptedFake, word_by_word

DEFAULT_REPLY = "Hello from the fake model."


@dataclass(frozen=True, slots=True)
class ScriptedCompletion:
    """What the fake does with one request."""

    text: str = DEFAULT_REPLY
    #: How the text is streamed; by default word by word (each word keeps its leading space).
    deltas: tuple[str, ...] | None = None
    #: A status other than 200 answers with an OpenAI error body instead of a completion.
    status: int = 200
    error_message: str = "scripted failure"
    retry_after_s: float | None = None
    #: Close the connection abruptly after this many content chunks.
    disconnect_after: int | None = None
    #: Wait for `StreamControl.release` after this many content chunks.
    hold_after: int | None = None
    #: None sends no finish chunk: the stream ends as if the server had lost track.
    finish_reason: str | None = "stop"
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    def pieces(self) -> tuple[str, ...]:
        return self.deltas if self.deltas is not None else word_by_word(self.text)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)


_ERROR_TYPES = {
    401: ("invalid_request_error", "invalid_api_key"),
    429: ("requests", "rate_limit_exceeded"),
}


class FakeOpenAI(ScriptedFake[ScriptedCompletion]):
    """The fake server; requests take scripted completions in order, then `default`."""

    def __init__(self, *, api_key: str | None = None, model: str = "fake-model") -> None:
        self.api_key = api_key
        self.model = model
        self.requests: list[RecordedRequest] = []
        self.streams_completed = 0
        #: What `/v1/audio/transcriptions` answers: the text, or an error status.
        self.transcript = "a scripted transcript"
        self.transcription_status = 200
        #: Each transcription request's form fields and uploaded file (name, bytes).
        self.transcriptions: list[tuple[dict[str, str], tuple[str, bytes]]] = []
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        app.router.add_get("/v1/models", self._models)
        super().__init__(app, ScriptedCompletion())

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def rate_limit(self, times: int, *, retry_after_s: float = 0.01) -> None:
        """Answer the next `times` requests with 429 and a short `retry-after`."""
        self.script(
            *(
                ScriptedCompletion(
                    status=429, error_message="Rate limit reached", retry_after_s=retry_after_s
                )
                for _ in range(times)
            )
        )

    async def _models(self, request: web.Request) -> web.Response:
        self.requests.append(RecordedRequest(request.path, dict(request.headers)))
        if self.api_key is not None and request.headers.get("Authorization") != (
            f"Bearer {self.api_key}"
        ):
            return _error(401, "Incorrect API key provided.")
        model = {"id": self.model, "object": "model", "created": 0, "owned_by": "octos-tests"}
        return web.json_response({"object": "list", "data": [model]})

    async def _transcriptions(self, request: web.Request) -> web.Response:
        form = await request.post()
        fields = {key: value for key, value in form.items() if isinstance(value, str)}
        upload = form.get("file")
        assert isinstance(upload, web.FileField), "the SDK uploads the audio as a file part"
        self.transcriptions.append((fields, (upload.filename, upload.file.read())))
        if self.transcription_status != 200:
            return _error(self.transcription_status, "scripted transcription failure")
        return web.json_response({"text": self.transcript})

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(RecordedRequest(request.path, dict(request.headers), body))
        if self.api_key is not None and request.headers.get("Authorization") != (
            f"Bearer {self.api_key}"
        ):
            shown = request.headers.get("Authorization", "")[-4:]
            return _error(401, f"Incorrect API key provided: ...{shown}.")
        script = self._next_script()
        if script.status != 200:
            return _error(script.status, script.error_message, script.retry_after_s)
        if not body.get("stream"):
            return web.json_response(self._completion(body, script))
        return await self._stream(request, body, script)

    async def _stream(
        self, request: web.Request, body: dict[str, Any], script: ScriptedCompletion
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        base = {
            "id": f"chatcmpl-fake{len(self.requests)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
            "system_fingerprint": None,
        }
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        extra = {"usage": None} if include_usage else {}
        pieces = script.pieces()
        try:
            await _send(response, {**base, "choices": [_choice({"role": "assistant"})], **extra})
            for sent, piece in enumerate(pieces):
                if await self._cut_before(request, script, sent):
                    return response
                await _send(response, {**base, "choices": [_choice({"content": piece})], **extra})
            if script.finish_reason is not None:
                finish = _choice({}, script.finish_reason)
                await _send(response, {**base, "choices": [finish], **extra})
            if include_usage:
                usage = _usage(body, len(pieces), script)
                await _send(response, {**base, "choices": [], "usage": usage})
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except BaseException:
            # Cancelled by aiohttp (handler_cancellation) or a failed write: the client left.
            self.control.client_disconnected.set()
            raise
        self.streams_completed += 1
        return response

    def _completion(self, body: dict[str, Any], script: ScriptedCompletion) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": script.text},
                    "logprobs": None,
                    "finish_reason": script.finish_reason,
                }
            ],
            "usage": _usage(body, len(script.pieces()), script),
        }


def _choice(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


def _usage(
    body: dict[str, Any], completion_tokens: int, script: ScriptedCompletion
) -> dict[str, Any]:
    # One token per word of the prompt: enough for tests to check what was counted.
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": script.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": script.reasoning_tokens},
    }


async def _send(response: web.StreamResponse, chunk: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode())


def _error(status: int, message: str, retry_after_s: float | None = None) -> web.Response:
    error_type, code = _ERROR_TYPES.get(status, ("server_error", None))
    headers = {}
    if retry_after_s is not None:
        headers["Retry-After"] = str(math.ceil(retry_after_s))
        headers["retry-after-ms"] = str(int(retry_after_s * 1000))
    payload = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return web.json_response(payload, status=status, headers=headers)
