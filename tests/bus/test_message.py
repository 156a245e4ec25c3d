"""Message, ToolCall and MessageRole on the wire."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from bus import (
    ClientMessageId,
    Message,
    MessageRole,
    ThreadId,
    ToolCall,
    TurnId,
    new_turn_id,
    thread_rooted_at,
)


def test_role_is_lowercase_on_the_wire() -> None:
    for role in MessageRole:
        message = Message(role=role, content="x")
        assert json.loads(message.to_json())["role"] == role.as_str() == role.value.lower()
        assert str(role) == role.as_str()


def test_unknown_role_is_refused() -> None:
    with pytest.raises(ValidationError):
        Message.from_json('{"role": "robot", "content": "x"}')


def test_plain_message_leaves_empty_fields_out() -> None:
    message = Message.user("hello")
    data = json.loads(message.to_json())
    assert set(data) == {"role", "content", "timestamp"}


def test_full_message_round_trips() -> None:
    call = ToolCall(
        id="call_1",
        name="read_file",
        arguments={"path": "/etc/hosts", "lines": [1, 2]},
        metadata={"thought_signature": "abc"},
    )
    message = Message(
        role=MessageRole.ASSISTANT,
        content="读取文件 📄",
        media=["/tmp/a.png"],
        tool_calls=[call],
        reasoning_content="thinking",
        client_message_id=ClientMessageId("cmid-1"),
        thread_id=ThreadId("cmid-1"),
        timestamp=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    restored = Message.from_json(message.to_json())
    assert restored == message
    assert restored.tool_calls is not None
    assert restored.tool_calls[0].metadata == {"thought_signature": "abc"}


def test_tool_message_round_trips_through_dict() -> None:
    message = Message.tool_with_thread("42", "call_1", ThreadId("t-1"))
    restored = Message.model_validate(message.to_dict())
    assert restored == message
    assert restored.role is MessageRole.TOOL
    assert restored.tool_call_id == "call_1"


def test_payload_without_optional_fields_reads_with_defaults() -> None:
    message = Message.from_json('{"role": "user", "content": "hi"}')
    assert message.media == []
    assert message.tool_calls is None
    assert message.client_message_id is None
    assert message.thread_id is None
    assert message.timestamp.tzinfo is not None


def test_unknown_fields_are_ignored() -> None:
    message = Message.from_json('{"role": "user", "content": "hi", "from_the_future": 1}')
    assert message.content == "hi"


def test_tool_call_arguments_default_to_an_empty_object() -> None:
    call = ToolCall.from_json('{"id": "1", "name": "shell"}')
    assert call.arguments == {}
    assert call.metadata is None
    assert ToolCall.from_json(call.to_json()) == call


def test_constructors_bind_identities() -> None:
    cmid = ClientMessageId("c-9")
    assert Message.user_with_cmid("q", cmid).client_message_id == cmid
    rooted = Message.user_rooting_thread("q", cmid)
    assert rooted.client_message_id == cmid
    assert rooted.thread_id == ThreadId("c-9")
    reply = Message.assistant_with_thread("a", ThreadId("c-9"))
    assert (reply.role, reply.thread_id) == (MessageRole.ASSISTANT, "c-9")
    assert Message.system("s").role is MessageRole.SYSTEM
    assert Message.assistant("a").role is MessageRole.ASSISTANT
    assert Message.user("u", media=["m.ogg"]).media == ["m.ogg"]


def test_messages_are_immutable() -> None:
    message = Message.user("hi")
    with pytest.raises(ValidationError):
        message.content = "changed"  # type: ignore[misc]


def test_identities_are_strings_on_the_wire_and_turn_ids_are_time_ordered() -> None:
    cmid = ClientMessageId("c-9")
    assert thread_rooted_at(cmid) == ThreadId("c-9")
    assert Message.user_rooting_thread("q", cmid).thread_id == thread_rooted_at(cmid)
    first, second = new_turn_id(), new_turn_id()
    assert isinstance(first, str)
    assert first != second
    # UUIDv7: later ids sort after earlier ones, so a turn id orders turns.
    assert sorted([second, first]) == [first, second]
    assert TurnId(first) == first


@pytest.mark.parametrize(
    "message",
    [
        Message.user("hi"),
        Message.user("with a picture", media=["/data/media/a.png"]),
        Message.assistant("hello"),
        Message(role=MessageRole.TOOL, content="42", tool_call_id="call-1"),
        Message(role=MessageRole.ASSISTANT, content="", tool_calls=[ToolCall(id="c", name="f")]),
        Message(
            role=MessageRole.ASSISTANT,
            content="thinking",
            reasoning_content="because",
            tool_calls=[ToolCall(id="c", name="f", arguments={"x": 1}, metadata={"p": 1})],
        ),
        Message.user_with_cmid("again", ClientMessageId("cm-1")),
        Message.user("non-ASCII: café, 東京, 🙂, \u2028"),
    ],
)
def test_a_message_line_leaves_out_exactly_its_defaults(message: Message) -> None:
    assert message.to_json() == message.model_dump_json(exclude_defaults=True)
    # The session line is serialized straight to bytes: the same text, in UTF-8.
    assert message.to_line() == message.model_dump_json(exclude_defaults=True).encode() + b"\n"
