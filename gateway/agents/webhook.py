"""The `webhook` agent: POSTs each turn to your own HTTP endpoint and relays its answer.

Request: `POST url` with `Content-Type: application/json` and the body

    {"profile": "work", "session_key": "work:telegram:42",
     "sender": {"id": "42|alice", "name": "Alice"},
     "chat": {"id": "42", "type": "private", "title": null},
     "message": {"role": "user", "content": "hi", "attachments": [...], ...},
     "history": [{"role": "user", ...}, {"role": "assistant", ...}]}

(messages in the session file's JSON form, oldest first, local paths left out), the configured
headers, and, when a `secret` is set, `X-Octos-Signature: sha256=<hex HMAC-SHA256 of the exact
body bytes>`. The message's files are `attachments`: `{"kind": "image|audio|video|file",
"mime", "name", "size", "sha256", "url"}` (a signed link to the gateway's `/media/`, valid for
`media_url_ttl_s`), or with `media: inline` the bytes as base64 `data` instead of `url`; audio
has its `transcript` when there is one. Earlier messages' files are named only (`kind`, `name`).
A button tap is a message whose `content` is the button's text and whose `callback` is
`{"data": <the button's data>, "message_id": <the bot message that held it>}`. A message that
quotes or replies to another has `reply_to`: `{"message_id": ..., "text": <its first 500
characters; empty where the platform does not tell them>, "from": "bot" | "user"}`. A user's
edit of a message whose turn had started arrives as a message of its own, its content
`[edited] <new text>` and the earlier text's start after it. With the profile's
`inbound_reactions`, a user's reaction to a bot message is a message whose content is
`[reaction 👍 to: <the message's first 100 characters>]` (or `[reaction 👍 to a message]` where
the text is not known) and whose `reaction` is `{"emoji": "👍", "message_id": <the bot
message>}`.

Reply, chosen by the response's `Content-Type`:
- `application/json`: `{"reply": "the whole answer", "usage": {...}, "attachments": [...]}`
  (`usage` optional, with the field names of `TokenUsage`: input_tokens, output_tokens,
  reasoning_tokens, cache_read_tokens, cache_write_tokens; `attachments` optional, below),
  optionally `"buttons": [[{"text": "Approve", "data": "refund:42:yes"}, ...], [{"text":
  "Docs", "url": "https://..."}]]` (rows of buttons under the reply; `data`, at most 64 bytes,
  comes back as a tap's `callback`) and `"reaction": "👍"` (the bot reacts to the user's
  message);
- `text/event-stream`: events `data: {"text": "<delta>"}`, optionally one
  `data: {"usage": {...}}` and one `data: {"attachments": [...]}`, ended by `data: [DONE]`; an
  event `data: {"error": "..."}` fails the turn; an event may carry `buttons` and `reaction`
  as the JSON reply does (the last one given counts);
- `application/x-ndjson` (or `application/jsonl`): one such JSON object per line, no `[DONE]`;
- `text/plain`: the body is the answer.
The reply's files, sent after its text: `"attachments": [{"url": "https://..." | "data":
"<base64>", "mime": "image/png", "name": "chart.png"}]` (`mime` and `name` optional). The
gateway fetches or decodes each before the turn is recorded; one it cannot (not http(s), not
2xx, over the profile's `max_media_bytes`, too slow) is left out and the text says so.
Any other status than 2xx fails the turn (redirects are not followed). The request is not
retried: a webhook may act on a turn, and acting twice is worse than apologising once.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Self

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bus import ButtonRows, Message, TokenUsage
from channels.media_info import kind_for, mime_for
from channels.media_links import MediaLinks
from channels.retry import parse_retry_after
from gateway.agents.base import Agent, AgentReply, AgentTurn, ReplyFile, SnapshotSink
from gateway.agents.errors import (
    AgentError,
    AgentErrors,
    AgentFailure,
    failure_for_status,
    secret_fragments,
    url_for_log,
)
from gateway.agents.snapshots import DEFAULT_PACING, SnapshotPacing
from gateway.agents.stream_decode import NdjsonDecoder, SseDataDecoder, StreamFormatError

if TYPE_CHECKING:
    from config import WebhookAgentConfig

MediaMode = Literal["url", "inline"]
SIGNATURE_HEADER: Final = "X-Octos-Signature"
MAX_REPLY_BYTES: Final = 16 * 1024 * 1024
_ERROR_BODY_BYTES: Final = 4096
_DONE: Final = "[DONE]"
_NDJSON_TYPES: Final = frozenset(
    {"application/x-ndjson", "application/jsonl", "application/ndjson"}
)
_ACCEPT: Final = "application/json, text/event-stream, application/x-ndjson, text/plain"


class WebhookAttachment(BaseModel):
    """A file of the reply: a URL to fetch or base64 bytes."""

    model_config = ConfigDict(extra="ignore")

    url: str | None = None
    data: str | None = None
    mime: str | None = None
    name: str | None = None

    def reply_file(self) -> ReplyFile:
        return ReplyFile(url=self.url, data=self.data, mime=self.mime, name=self.name)


class WebhookJsonReply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    reply: str
    usage: TokenUsage = Field(default_factory=TokenUsage)
    buttons: ButtonRows = Field(default_factory=list)
    reaction: str | None = None
    attachments: list[WebhookAttachment] = Field(default_factory=list)


class WebhookStreamEvent(BaseModel):
    model_config = ConfigDict(extra="ignore")

    text: str = ""
    usage: TokenUsage | None = None
    error: str | None = None
    buttons: ButtonRows | None = None
    reaction: str | None = None
    attachments: list[WebhookAttachment] | None = None


@dataclass(slots=True)
class _StreamOutcome:
    usage: TokenUsage = field(default_factory=TokenUsage)
    bytes_received: int = 0
    buttons: ButtonRows = field(default_factory=list)
    reaction: str | None = None
    attachments: list[ReplyFile] = field(default_factory=list)


def encode_turn(turn: AgentTurn, attachments: list[dict[str, Any]] | None = None) -> bytes:
    """The request body for a turn (compact UTF-8 JSON; the signature covers these bytes);
    `attachments` are the new message's files as the webhook is to see them."""
    message = _without_paths(turn.message)
    if attachments:
        message["attachments"] = attachments
    if turn.callback is not None:
        message["callback"] = dict(turn.callback)
    if turn.reply_to is not None:
        message["reply_to"] = dict(turn.reply_to)
    if turn.reaction is not None:
        message["reaction"] = dict(turn.reaction)
    payload = {
        "profile": turn.profile,
        "session_key": str(turn.session_key),
        "sender": asdict(turn.sender) if turn.sender else None,
        "chat": asdict(turn.chat) if turn.chat else None,
        "message": message,
        "history": [_without_paths(earlier) for earlier in turn.history],
    }
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _without_paths(message: Message) -> dict[str, Any]:
    """A message's JSON form with its files named by kind and name, never by local path."""
    encoded = message.to_dict()
    media = encoded.pop("media", None)
    if media:
        encoded["attachments"] = [
            {"kind": kind_for(mime_for(path)), "name": Path(path).name} for path in media
        ]
    return encoded


async def attachment_fields(
    turn: AgentTurn, mode: MediaMode, links: MediaLinks | None, ttl_s: float
) -> list[dict[str, Any]]:
    """The new message's files for the request: described, with a link or the bytes."""
    described: list[dict[str, Any]] = []
    for media in turn.attachments:
        fields: dict[str, Any] = {
            "kind": media.kind,
            "mime": media.mime,
            "name": media.name,
            "size": media.size,
            "sha256": media.sha256,
        }
        if mode == "inline":
            try:
                data = await asyncio.to_thread(Path(media.path).read_bytes)
            except OSError as error:
                fields["error"] = f"the file cannot be read: {error.strerror}"
            else:
                fields["data"] = base64.b64encode(data).decode("ascii")
        elif links is not None:
            fields["url"] = links.url_for(media, ttl_s)
        if media.duration_s is not None:
            fields["duration_s"] = media.duration_s
        if (transcript := turn.transcripts.get(media.path)) is not None:
            fields["transcript"] = transcript
        described.append(fields)
    return described


def sign_body(secret: str, body: bytes) -> str:
    """The `X-Octos-Signature` value for a body: `sha256=` and the hex HMAC-SHA256."""
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """What a webhook server should do with the header: constant-time comparison."""
    return header is not None and hmac.compare_digest(sign_body(secret, body), header)


class WebhookAgent(Agent):
    """Relays turns to an HTTP endpoint; see the module documentation for the protocol."""

    kind = "webhook"

    def __init__(
        self,
        config: WebhookAgentConfig,
        *,
        snapshots: SnapshotPacing = DEFAULT_PACING,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        media_links: MediaLinks | None = None,
    ) -> None:
        self._url = config.url
        self._media_mode: MediaMode = config.media
        self._media_ttl_s = config.media_url_ttl_s
        self._media_links = media_links
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=config.timeout_s, sock_read=config.timeout_s
        )
        self._timeout_s = config.timeout_s
        self._secret = config.secret.get_secret_value() if config.secret is not None else None
        self._headers = {
            name: value if isinstance(value, str) else value.get_secret_value()
            for name, value in config.headers.items()
        }
        self._errors = AgentErrors(
            f"webhook agent ({url_for_log(config.url)})",
            secret_fragments([*self._headers.values(), *([self._secret] if self._secret else [])]),
        )
        self._snapshots = snapshots
        self._max_reply_bytes = max_reply_bytes
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    async def __aenter__(self) -> Self:
        self._open_session()
        return self

    async def aclose(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def run(self, turn: AgentTurn, on_snapshot: SnapshotSink) -> AgentReply:
        outcome = _StreamOutcome()
        attachments = await attachment_fields(
            turn, self._media_mode, self._media_links, self._media_ttl_s
        )
        body = encode_turn(turn, attachments)
        content = await self._snapshots.relay(self._deltas(body, outcome), on_snapshot)
        return AgentReply(
            content,
            outcome.usage,
            buttons=outcome.buttons,
            reaction=outcome.reaction,
            attachments=outcome.attachments,
        )

    def _open_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the webhook agent is closed")
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    def _request_headers(self, body: bytes) -> dict[str, str]:
        headers = {"Accept": _ACCEPT, **self._headers, "Content-Type": "application/json"}
        if self._secret:
            headers[SIGNATURE_HEADER] = sign_body(self._secret, body)
        return headers

    async def _deltas(self, body: bytes, outcome: _StreamOutcome) -> AsyncGenerator[str, None]:
        """The reply's text deltas; records usage; raises only AgentError.

        Only the HTTP work sits inside the `try`: what the consumer does with a delta (the
        snapshot sink) raises its own exceptions, untranslated.
        """
        session = self._open_session()
        headers = self._request_headers(body)
        try:
            async with session.post(
                self._url, data=body, headers=headers, allow_redirects=False
            ) as response:
                if not 200 <= response.status < 300:
                    raise await self._status_error(response)
                async with aclosing(self._reply_deltas(response, outcome)) as deltas:
                    async for delta in deltas:
                        yield delta
        except TimeoutError as exc:
            detail = f"no answer within {self._timeout_s} s"
            raise self._errors.error(AgentFailure.TIMEOUT, detail) from exc
        except aiohttp.ClientPayloadError as exc:
            detail = f"connection lost after {outcome.bytes_received} bytes of the reply: {exc}"
            raise self._errors.error(AgentFailure.INTERRUPTED, detail) from exc
        except aiohttp.ClientError as exc:
            failure = (
                AgentFailure.INTERRUPTED if outcome.bytes_received else AgentFailure.UNAVAILABLE
            )
            raise self._errors.error(
                failure, f"request failed: {self._errors.mask(repr(exc))}"
            ) from exc
        except StreamFormatError as exc:
            raise self._errors.error(AgentFailure.BAD_REPLY, str(exc)) from None

    async def _reply_deltas(
        self, response: aiohttp.ClientResponse, outcome: _StreamOutcome
    ) -> AsyncGenerator[str, None]:
        content_type = response.content_type
        decoder: SseDataDecoder | NdjsonDecoder
        if content_type == "text/event-stream":
            decoder = SseDataDecoder()
        elif content_type in _NDJSON_TYPES:
            decoder = NdjsonDecoder()
        elif content_type == "application/json":
            reply = self._json_reply(await self._read_body(response, outcome))
            outcome.usage = reply.usage
            outcome.buttons, outcome.reaction = reply.buttons, reply.reaction
            outcome.attachments = [attachment.reply_file() for attachment in reply.attachments]
            yield reply.reply
            return
        elif content_type == "text/plain":
            body = await self._read_body(response, outcome)
            yield body.decode(response.charset or "utf-8", errors="replace")
            return
        else:
            detail = f"unsupported reply Content-Type {content_type!r}"
            raise self._errors.error(AgentFailure.BAD_REPLY, detail)
        async for chunk in response.content.iter_any():
            self._count(chunk, outcome)
            for payload in decoder.feed(chunk):
                if payload.strip() == _DONE:
                    return
                if delta := self._stream_event(payload, outcome):
                    yield delta
        for payload in decoder.finish():
            if payload.strip() != _DONE and (delta := self._stream_event(payload, outcome)):
                yield delta

    async def _read_body(self, response: aiohttp.ClientResponse, outcome: _StreamOutcome) -> bytes:
        chunks = []
        async for chunk in response.content.iter_any():
            self._count(chunk, outcome)
            chunks.append(chunk)
        return b"".join(chunks)

    def _count(self, chunk: bytes, outcome: _StreamOutcome) -> None:
        outcome.bytes_received += len(chunk)
        if outcome.bytes_received > self._max_reply_bytes:
            raise StreamFormatError(f"the reply is larger than {self._max_reply_bytes} bytes")

    def _stream_event(self, data: str, outcome: _StreamOutcome) -> str:
        try:
            event = WebhookStreamEvent.model_validate_json(data)
        except ValidationError:
            detail = f"a stream event is not the expected JSON: {self._errors.mask(data)}"
            raise self._errors.error(AgentFailure.BAD_REPLY, detail) from None
        if event.error is not None:
            detail = f"the webhook reported an error: {self._errors.mask(event.error)}"
            raise self._errors.error(AgentFailure.UNAVAILABLE, detail)
        if event.usage is not None:
            outcome.usage = event.usage
        if event.buttons is not None:
            outcome.buttons = event.buttons
        if event.reaction is not None:
            outcome.reaction = event.reaction
        if event.attachments is not None:
            outcome.attachments.extend(attachment.reply_file() for attachment in event.attachments)
        return event.text

    def _json_reply(self, body: bytes) -> WebhookJsonReply:
        try:
            return WebhookJsonReply.model_validate_json(body)
        except ValidationError:
            got = self._errors.mask(body.decode("utf-8", "replace"))
            detail = f"expected {{'reply': ...}}, got {got}"
            raise self._errors.error(AgentFailure.BAD_REPLY, detail) from None

    async def _status_error(self, response: aiohttp.ClientResponse) -> AgentError:
        raw = await response.content.read(_ERROR_BODY_BYTES)
        body = self._errors.mask(raw.decode("utf-8", errors="replace"))
        return self._errors.error(
            failure_for_status(response.status),
            f"HTTP {response.status}: {body}",
            status=response.status,
            retry_after_s=parse_retry_after(response.headers.get("Retry-After")),
        )
