"""The agent a profile talks to: the built-in echo agent, an OpenAI-compatible API, a webhook."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, Field, PositiveFloat, SecretStr, Tag

from config.common import AtLeastOne, ConfigModel, HttpUrlText, OptionalSecret


class EchoAgentConfig(ConfigModel):
    type: Literal["echo"] = Field(
        "echo", description="Agent kind: echo replies with the user's own text, streamed."
    )
    delay_s: float = Field(
        0.0, ge=0, description="Pause between streamed pieces of the reply, in seconds."
    )
    pieces: AtLeastOne = Field(3, description="Number of stream snapshots the reply is sent in.")
    fail_when: str | None = Field(
        None,
        description="Fail every turn whose message contains this text, as an unreachable model "
        "would (for trying out retries and dead letters).",
    )


class OpenAIAgentConfig(ConfigModel):
    type: Literal["openai"] = Field(
        "openai",
        description="Agent kind: any OpenAI-compatible /chat/completions API "
        "(OpenAI, Ollama, vLLM, llama.cpp).",
    )
    base_url: HttpUrlText = Field(
        "https://api.openai.com/v1",
        description="Base URL of the API; /chat/completions is appended.",
    )
    model: str = Field(min_length=1, description="Model name sent with every request.")
    api_key: OptionalSecret = Field(
        None, description="Bearer token for the API; leave unset for local servers."
    )
    system_prompt: str | None = Field(
        None, description="System message put before the conversation history."
    )
    max_history: int = Field(
        40, ge=0, description="Most recent session messages sent to the API with each request."
    )
    timeout_s: PositiveFloat = Field(
        120, description="Longest wait for the API to answer one request, in seconds."
    )
    temperature: float | None = Field(
        None, ge=0, le=2, description="Sampling temperature; unset uses the server's default."
    )
    max_tokens: AtLeastOne | None = Field(
        None, description="Upper bound on tokens in one reply; unset means no bound."
    )
    vision: bool = Field(
        True,
        description="Send the new message's images to the model as image parts; false names "
        "them in the text instead (for models without vision).",
    )
    max_image_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1024,
        description="Largest image sent to the model, in bytes; larger ones are scaled down, "
        "or named in the text when that cannot bring them under.",
    )
    max_file_chars: int = Field(
        20_000,
        ge=0,
        description="Longest text file (UTF-8) put into the message, in characters; other "
        "files are named with their type and size.",
    )


class WebhookAgentConfig(ConfigModel):
    type: Literal["webhook"] = Field(
        "webhook", description="Agent kind: POSTs each turn as JSON to your own URL."
    )
    url: HttpUrlText = Field(description="URL the turn is POSTed to.")
    # Left-to-right: every string becomes a SecretStr, since headers usually carry credentials.
    headers: dict[str, Annotated[SecretStr | str, Field(union_mode="left_to_right")]] = Field(
        default_factory=dict,
        description="Extra HTTP headers sent with every request (values are kept secret).",
    )
    timeout_s: PositiveFloat = Field(
        120, description="Longest wait for the webhook to answer, in seconds."
    )
    secret: OptionalSecret = Field(
        None,
        description="Key for an HMAC-SHA256 signature of the request body, sent as "
        "X-Octos-Signature: sha256=<hex>.",
    )
    media: Literal["url", "inline"] = Field(
        "url",
        description="How attachments reach the webhook: url (a signed, expiring link to the "
        "gateway's HTTP server) or inline (the bytes as base64 `data`).",
    )
    media_url_ttl_s: PositiveFloat = Field(
        3600, description="How long an attachment's link stays valid, in seconds."
    )


class TranscriptionConfig(ConfigModel):
    base_url: HttpUrlText = Field(
        "https://api.openai.com/v1",
        description="Base URL of an OpenAI-compatible API; /audio/transcriptions is appended "
        "(OpenAI, Groq, a local whisper server).",
    )
    model: str = Field("whisper-1", min_length=1, description="Transcription model name.")
    api_key: OptionalSecret = Field(
        None, description="Bearer token for the API; leave unset for local servers."
    )
    language: str | None = Field(
        None, description="ISO-639-1 language of the audio (e.g. en); unset lets the model tell."
    )
    max_seconds: PositiveFloat = Field(
        600,
        description="Longest voice message transcribed, in seconds; longer ones reach the "
        "agent as a placeholder.",
    )
    timeout_s: PositiveFloat = Field(
        120, description="Longest wait for one transcription, in seconds."
    )


AGENT_TYPES = ("echo", "openai", "webhook")


def _agent_type(value: object) -> str | None:
    # A missing `type` means the default agent, so `agent: {delay_s: 1}` is an echo agent.
    if isinstance(value, dict):
        kind = value.get("type", "echo")
        return kind if isinstance(kind, str) else None
    kind = getattr(value, "type", None)
    return kind if isinstance(kind, str) else None


AgentConfig = Annotated[
    Annotated[EchoAgentConfig, Tag("echo")]
    | Annotated[OpenAIAgentConfig, Tag("openai")]
    | Annotated[WebhookAgentConfig, Tag("webhook")],
    Discriminator(_agent_type),
]
"""Any agent configuration, told apart by its `type` (default `echo`)."""


#: The agent a profile's `agent:` section gives, and the one that answers when no route does.
DEFAULT_AGENT = "default"

ChatKind = Literal["group", "private"]


class RouteMatch(ConfigModel):
    """What a message must be for its route to apply; every key given must match, an empty
    `match` matches everything."""

    channel: str | None = Field(
        None, description="Channel type the message came from (telegram, slack, api...)."
    )
    chat: list[str] = Field(
        default_factory=list, description="Chat ids the route applies to; empty: every chat."
    )
    chat_type: ChatKind | None = Field(
        None,
        description="group (several people, a channel included) or private (one person and "
        "the bot); a chat whose channel does not say which matches neither.",
    )
    sender: list[str] = Field(
        default_factory=list, description="Sender ids the route applies to; empty: everyone."
    )
    prefix: str | None = Field(
        None,
        min_length=1,
        description="Text the message starts with (as a word: `/code` matches `/code fix it`, "
        "not `/codex`); it is taken off the text the agent sees and the session stores.",
    )


class AgentRoute(ConfigModel):
    match: RouteMatch = Field(
        default_factory=RouteMatch, description="Which messages this route takes."
    )
    agent: str = Field(min_length=1, description="Name of the agent (in `agents:`) that answers.")
