"""Conversation messages: the unit every provider, channel and session file shares."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

from bus.identity import ClientMessageId, ThreadId, thread_rooted_at


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
