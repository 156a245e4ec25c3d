"""The `openai` agent: any OpenAI-compatible `/v1/chat/completions` endpoint, streamed.

Works with OpenAI itself and with the servers that speak its protocol (Ollama, vLLM, llama.cpp,
LiteLLM...). The official SDK does the HTTP: retries with backoff (429s wait the server's
`retry-after`), timeouts, SSE parsing. This module turns a turn into the request, the chunks into
snapshots and usage, and the SDK's exceptions into `AgentError`s.

Tool results are left out of the history (this agent offers the model no tools, so they could
not be matched to a call). The new message's files are shown as `openai_media` says: images as
image parts, text files inlined; earlier messages' files are named only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import openai
import structlog
from openai import AsyncOpenAI
from openai.types import CompletionUsage
from openai.types.chat import (
    ChatCompletionContentPartParam,
    ChatCompletionMessageParam,
    ChatCompletionUserMessageParam,
)

from bus import Message, MessageRole, TokenUsage
from channels.retry import parse_retry_after
from gateway.agents.base import Agent, AgentReply, AgentTurn, SnapshotSink, quoted_line
from gateway.agents.errors import (
    AgentError,
    AgentErrors,
    AgentFailure,
    failure_for_status,
    url_for_log,
)
from gateway.agents.openai_media import (
    images_in_reply,
    message_parts,
    named_in_history,
    participant_name,
)
from gateway.agents.snapshots import DEFAULT_PACING, SnapshotPacing

if TYPE_CHECKING:
    from config import OpenAIAgentConfig

log = structlog.get_logger(__name__)

#: Sent when no key is configured: local servers (Ollama, llama.cpp) ignore it, the SDK needs one.
PLACEHOLDER_API_KEY = "no-key"
DEFAULT_MAX_RETRIES = 2


class _SamplingParams(TypedDict, total=False):
    # Only the parameters the profile sets are sent: some servers refuse an explicit null.
    temperature: float
    max_tokens: int


@dataclass(slots=True)
class _StreamOutcome:
    usage: TokenUsage
    finish_reason: str | None = None
    chunks_received: int = 0


def _legacy_transport_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """(timeouts, other transport errors) of httpx, which openai<3 lets escape mid-stream.

    Later versions wrap them in APITimeoutError / APIConnectionError.
    """
    try:
        import httpx
    except ImportError:  # pragma: no cover - only without the legacy transport installed
        return (), ()
    return (httpx.TimeoutException,), (httpx.TransportError,)


_LEGACY_TIMEOUTS, _LEGACY_TRANSPORT_ERRORS = _legacy_transport_errors()
_TIMEOUTS: tuple[type[Exception], ...] = (openai.APITimeoutError, *_LEGACY_TIMEOUTS)


def chat_messages(
    system_prompt: str | None,
    history: Sequence[Message],
    message: Message,
    max_history: int,
    *,
    content: str | list[ChatCompletionContentPartParam] | None = None,
    name: str | None = None,
) -> list[ChatCompletionMessageParam]:
    """The request's messages: system prompt, the last `max_history` turns, the user message
    (`content` when given: its text and image parts; `name`: who sent it, in a group)."""
    messages: list[ChatCompletionMessageParam] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    window = history[-max_history:] if max_history > 0 else ()
    for earlier in window:
        text = earlier.content
        if earlier.media:
            files = named_in_history(earlier.media)
            text = f"{text}\n{files}" if text else files
        if not text:
            continue
        match earlier.role:
            case MessageRole.SYSTEM:
                messages.append({"role": "system", "content": text})
            case MessageRole.USER:
                messages.append({"role": "user", "content": text})
            case MessageRole.ASSISTANT:
                messages.append({"role": "assistant", "content": text})
            case MessageRole.TOOL:
                continue
    user: ChatCompletionUserMessageParam = {
        "role": "user",
        "content": message.content if content is None else content,
    }
    if name is not None:
        user["name"] = name
    messages.append(user)
    return messages


def _sender_name(turn: AgentTurn) -> str | None:
    """The sender's display name, for the model to tell people apart in a group."""
    chat, sender = turn.chat, turn.sender
    if chat is None or chat.type not in ("group", "channel") or sender is None:
        return None
    return participant_name(sender.name) if sender.name else None


def _with_quote(turn: AgentTurn) -> str:
    """The message's text, after a line with the text it quotes, if it quotes one."""
    line = quoted_line(turn)
    return turn.message.content if line is None else f"{line}\n{turn.message.content}"


def usage_from(usage: CompletionUsage) -> TokenUsage:
    """Map OpenAI's counters; `input_tokens` includes the cached ones, as OpenAI counts them."""
    prompt_details = usage.prompt_tokens_details
    completion_details = usage.completion_tokens_details
    return TokenUsage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        reasoning_tokens=(completion_details.reasoning_tokens or 0) if completion_details else 0,
        cache_read_tokens=(prompt_details.cached_tokens or 0) if prompt_details else 0,
        cache_write_tokens=getattr(prompt_details, "cache_write_tokens", None) or 0,
    )


class OpenAICompatAgent(Agent):
    """Streams chat completions from an OpenAI-compatible server."""

    kind = "openai"

    def __init__(
        self,
        config: OpenAIAgentConfig,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        snapshots: SnapshotPacing = DEFAULT_PACING,
    ) -> None:
        self._config = config
        self._api_key = (
            config.api_key.get_secret_value() if config.api_key is not None else None
        ) or PLACEHOLDER_API_KEY
        self._errors = AgentErrors(
            f"openai agent (model {config.model} at {url_for_log(config.base_url)})",
            (self._api_key,),
        )
        self._max_retries = max_retries
        self._snapshots = snapshots
        self._client: AsyncOpenAI | None = None
        self._closed = False

    async def run(self, turn: AgentTurn, on_snapshot: SnapshotSink) -> AgentReply:
        outcome = _StreamOutcome(usage=TokenUsage())
        content = await self._snapshots.relay(self._deltas(turn, outcome), on_snapshot)
        if outcome.finish_reason not in ("stop", None):
            log.info(
                "openai.reply_ended_early",
                model=self._config.model,
                finish_reason=outcome.finish_reason,
            )
        text, images = images_in_reply(content)
        return AgentReply(text, outcome.usage, attachments=images)

    async def aclose(self) -> None:
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _open_client(self) -> AsyncOpenAI:
        if self._closed:
            raise RuntimeError("the openai agent is closed")
        if self._client is None:
            self._client = AsyncOpenAI(
                base_url=self._config.base_url,
                api_key=self._api_key,
                timeout=self._config.timeout_s,
                max_retries=self._max_retries,
            )
        return self._client

    def _sampling(self) -> _SamplingParams:
        params = _SamplingParams()
        if self._config.temperature is not None:
            params["temperature"] = self._config.temperature
        if self._config.max_tokens is not None:
            params["max_tokens"] = self._config.max_tokens
        return params

    async def _deltas(self, turn: AgentTurn, outcome: _StreamOutcome) -> AsyncGenerator[str, None]:
        """The reply's text deltas; records usage and finish reason; raises only AgentError.

        Only the SDK's work sits inside the `try`: what the consumer does with a delta (the
        snapshot sink) raises its own exceptions, untranslated.
        """
        client = self._open_client()
        config = self._config
        messages = chat_messages(
            config.system_prompt,
            turn.history,
            turn.message,
            config.max_history,
            content=await message_parts(_with_quote(turn), turn.attachments, config),
            name=_sender_name(turn),
        )
        try:
            chunks = await client.chat.completions.create(
                model=config.model,
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
                **self._sampling(),
            )
            async with chunks:
                async for chunk in chunks:
                    outcome.chunks_received += 1
                    if chunk.usage is not None:
                        outcome.usage = usage_from(chunk.usage)
                    for choice in chunk.choices:
                        if choice.index != 0:
                            continue
                        if choice.finish_reason is not None:
                            outcome.finish_reason = choice.finish_reason
                        if choice.delta is not None and choice.delta.content:
                            yield choice.delta.content
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from None
        except _TIMEOUTS as exc:
            raise self._errors.error(
                AgentFailure.TIMEOUT, f"no answer within {config.timeout_s} s"
            ) from exc
        except openai.APIConnectionError as exc:
            raise self._connection_error(exc, outcome) from exc
        except openai.APIError as exc:
            # An error event inside an otherwise healthy stream.
            raise self._errors.error(
                AgentFailure.UNAVAILABLE, f"stream error: {self._errors.mask(exc.message)}"
            ) from None
        except _LEGACY_TRANSPORT_ERRORS as exc:
            raise self._errors.error(
                AgentFailure.INTERRUPTED, f"connection lost mid-reply: {exc!r}"
            ) from exc
        if outcome.finish_reason is None:
            raise self._errors.error(
                AgentFailure.INTERRUPTED, "the stream ended before the model finished"
            )

    def _status_error(self, exc: openai.APIStatusError) -> AgentError:
        body = json.dumps(exc.body) if exc.body is not None else exc.message
        failure = failure_for_status(exc.status_code)
        status = exc.status_code
        # The statuses the SDK retries by itself.
        retried = self._max_retries and (status in (408, 409, 429) or status >= 500)
        attempts = f" after {self._max_retries} retries" if retried else ""
        return self._errors.error(
            failure,
            f"HTTP {exc.status_code}{attempts}: {self._errors.mask(body)}",
            status=exc.status_code,
            retry_after_s=parse_retry_after(exc.response.headers.get("retry-after")),
        )

    def _connection_error(
        self, exc: openai.APIConnectionError, outcome: _StreamOutcome
    ) -> AgentError:
        cause = exc.__cause__ or exc
        if outcome.chunks_received:
            return self._errors.error(
                AgentFailure.INTERRUPTED,
                f"connection lost after {outcome.chunks_received} chunks: "
                f"{self._errors.mask(repr(cause))}",
            )
        return self._errors.error(
            AgentFailure.UNAVAILABLE, f"connection failed: {self._errors.mask(repr(cause))}"
        )
