"""Conversation messages and the wire models they are made of: the unit every provider,
channel and session file shares.

- `WireModel`, the base of the domain's JSON types (fields left at their default are left out),
  and its two kinds that always write one field: `TaggedModel`, a variant of a tagged union
  (its `type`), and `VersionedModel`, a payload that outlives the process (its
  `schema_version`; a newer one is refused with `UnsupportedSchemaVersion` while parsing).
- Identities a type checker keeps apart: a client message id (the client's optimistic-UI /
  idempotency token), a thread id (the render grouping key) and a turn id (the server's
  protocol identity) are all strings on the wire, but mixing them up silently files replies
  under the wrong bubble, so each is its own type.
- `Message`, `ToolCall`, `TokenUsage` (token accounting for one turn or many).
- `SessionSummary`: a typed compaction of a conversation, kept field by field. Compacting a
  long session into one paragraph of prose loses what a later compaction needs to update: the
  goal, the constraints, what is done and in progress, the decisions (and which of them no
  longer hold), the files touched, the next steps. Kept apart, each can be revised on the next
  compaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, NewType, Self

import uuid_utils
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from bus.errors import UnsupportedSchemaVersion

ClientMessageId = NewType("ClientMessageId", str)
ThreadId = NewType("ThreadId", str)
TurnId = NewType("TurnId", str)


def thread_rooted_at(cmid: ClientMessageId) -> ThreadId:
    """The thread that a user message starts: rooted at its client message id."""
    return ThreadId(str(cmid))


def new_turn_id() -> TurnId:
    """A fresh, time-ordered turn id (UUIDv7).

    uuid-utils makes it in Rust from a generator seeded once: no system call per id (an
    `os.urandom` per id gives the event loop's GIL away on every turn)."""
    return TurnId(str(uuid_utils.uuid7()))


def turn_made_at(turn_id: str) -> float | None:
    """When a turn id was made, in seconds since the epoch, read from its UUIDv7 timestamp;
    None for an id of another form."""
    try:
        value = uuid.UUID(turn_id)
    except ValueError:
        return None
    if value.version != 7:
        return None
    return (value.int >> 80) / 1000


def utc_now() -> datetime:
    return datetime.now(UTC)


class MessageRole(StrEnum):
    """Who speaks; always lowercase on the wire, whatever the provider calls it."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"

    def as_str(self) -> str:
        return self.value


class WireModel(BaseModel):
    """Base of the domain's JSON types: fields left at their default are left out of JSON."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    def to_json(self) -> str:
        return self.model_dump_json(exclude_defaults=True)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_defaults=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        return cls.model_validate_json(text)


class ToolCall(WireModel):
    """A tool invocation requested by the model; `metadata` carries provider-specific extras."""

    id: str
    name: str
    arguments: Any = Field(default_factory=dict)
    metadata: Any | None = None


_NO_MEDIA: set[str] = {"media"}


class Message(WireModel):
    role: MessageRole
    content: str
    media: list[str] = Field(default_factory=list)
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    client_message_id: ClientMessageId | None = None
    thread_id: ThreadId | None = None
    timestamp: datetime = Field(default_factory=utc_now)

    def to_json(self) -> str:
        return self._json_bytes().decode()

    def to_line(self) -> bytes:
        """The message's line in a session file: `to_json()` in UTF-8, then a newline."""
        return self._json_bytes() + b"\n"

    @staticmethod
    def lines_of(messages: Iterable[Message]) -> bytes:
        """`messages` as they stand in a session file: their lines, in order."""
        return b"".join(map(Message.to_line, messages))

    def _json_bytes(self) -> bytes:
        # pydantic-core serializes to UTF-8 bytes; `model_dump_json` only decodes them into a
        # str, which a session line would encode straight back (the same call, same options).
        # Every optional field but `media` defaults to None, so without tool calls (whose
        # arguments default to {}) leaving out None and an empty `media` is leaving out the
        # defaults, without calling each default factory to compare (a session line a message).
        if self.tool_calls is not None:
            return self.__pydantic_serializer__.to_json(self, exclude_defaults=True)
        exclude = None if self.media else _NO_MEDIA
        return self.__pydantic_serializer__.to_json(self, exclude_none=True, exclude=exclude)

    @classmethod
    def user(cls, content: str, *, media: list[str] | None = None) -> Message:
        return cls(role=MessageRole.USER, content=content, media=media or [])

    @classmethod
    def assistant(cls, content: str) -> Message:
        return cls(role=MessageRole.ASSISTANT, content=content)

    @classmethod
    def system(cls, content: str) -> Message:
        return cls(role=MessageRole.SYSTEM, content=content)

    @classmethod
    def user_with_cmid(cls, content: str, cmid: ClientMessageId) -> Message:
        return cls(role=MessageRole.USER, content=content, client_message_id=cmid)

    @classmethod
    def user_rooting_thread(cls, content: str, cmid: ClientMessageId) -> Message:
        """A user message that also roots the thread its replies are grouped under."""
        return cls(
            role=MessageRole.USER,
            content=content,
            client_message_id=cmid,
            thread_id=thread_rooted_at(cmid),
        )

    @classmethod
    def assistant_with_thread(cls, content: str, thread_id: ThreadId) -> Message:
        return cls(role=MessageRole.ASSISTANT, content=content, thread_id=thread_id)

    @classmethod
    def tool_with_thread(cls, content: str, tool_call_id: str, thread_id: ThreadId) -> Message:
        return cls(
            role=MessageRole.TOOL, content=content, tool_call_id=tool_call_id, thread_id=thread_id
        )


class TokenUsage(WireModel):
    """Five counters; zero ones are left out of JSON."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


def _put_first(name: str, value: object, data: Any) -> Any:
    """The serialised `data` with `name` first (always written, even when it is the default),
    so a reader sees what kind or version of payload it holds before anything else."""
    if isinstance(data, dict):
        return {name: value, **data}
    return data


class TaggedModel(WireModel):
    """One variant of a tagged union; subclasses narrow `type` to a `Literal` with a default."""

    type: str

    @model_serializer(mode="wrap")
    def _write_tag(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _put_first("type", self.type, handler(self))


class VersionedModel(WireModel):
    """A payload that outlives the process (on disk, across processes): it carries its version.

    A payload without `schema_version` is version 1. One newer than `SUPPORTED_SCHEMA_VERSION`
    raises `UnsupportedSchemaVersion` while parsing, before any other field is read, so new
    fields are never silently dropped and a changed shape never surfaces as a raw pydantic error.
    """

    SUPPORTED_SCHEMA_VERSION: ClassVar[int] = 1
    PAYLOAD_NAME: ClassVar[str] = "payload"

    schema_version: int = Field(default=1, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _refuse_future_versions(cls, data: Any) -> Any:
        if isinstance(data, dict):
            found = data.get("schema_version")
            if isinstance(found, int) and not isinstance(found, bool):
                cls._check_version(found)
        return data

    @model_validator(mode="after")
    def _refuse_coerced_future_versions(self) -> VersionedModel:
        # A version given as "2" is coerced to int only after the before-validator ran.
        self._check_version(self.schema_version)
        return self

    @model_serializer(mode="wrap")
    def _write_version(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _put_first("schema_version", self.schema_version, handler(self))

    @classmethod
    def _check_version(cls, found: int) -> None:
        if found > cls.SUPPORTED_SCHEMA_VERSION:
            raise UnsupportedSchemaVersion(cls.PAYLOAD_NAME, found, cls.SUPPORTED_SCHEMA_VERSION)

    def validate_schema_version(self) -> None:
        """Raise `UnsupportedSchemaVersion` if this payload is newer than this build reads.

        Parsing already checks; this is for objects built without validation (`model_construct`).
        """
        self._check_version(self.schema_version)


SESSION_SUMMARY_SCHEMA_VERSION = 1


class DecisionRecord(WireModel):
    """A decision taken in the conversation; `stale` once later turns overrode it."""

    decision: str
    rationale: str | None = None
    stale: bool = False


class FileRecord(WireModel):
    """A file the conversation touched, and what about it matters."""

    path: str
    note: str | None = None


class SessionSummary(VersionedModel):
    SUPPORTED_SCHEMA_VERSION: ClassVar[int] = SESSION_SUMMARY_SCHEMA_VERSION
    PAYLOAD_NAME: ClassVar[str] = "SessionSummary"

    goal: str
    constraints: list[str] = Field(default_factory=list)
    progress_done: list[str] = Field(default_factory=list)
    progress_in_progress: list[str] = Field(default_factory=list)
    decisions: list[DecisionRecord] = Field(default_factory=list)
    files: list[FileRecord] = Field(default_factory=list)
    next_steps: list[str] = Field(default_factory=list)

    def active_decisions(self) -> list[DecisionRecord]:
        """The decisions that still hold."""
        return [decision for decision in self.decisions if not decision.stale]
