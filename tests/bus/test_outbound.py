"""Typed outbound events: what the agent side sends towards a chat, and what each one means."""

from __future__ import annotations

import dataclasses

import pytest

from bus import (
    ButtonsUsed,
    OutboundEvent,
    OutboundMessage,
    ReactionChanged,
    StreamSnapshot,
    TypingStarted,
    TypingStopped,
    create_bus,
)


def _reply(content: str, stream_id: str | None = "s1") -> OutboundMessage:
    return OutboundMessage(channel="telegram", chat_id="42", content=content, stream_id=stream_id)


def test_a_snapshot_names_its_chat_and_stream_through_its_reply() -> None:
    snapshot = StreamSnapshot(_reply("half"))
    assert (snapshot.channel, snapshot.chat_id, snapshot.stream_id) == ("telegram", "42", "s1")
    assert snapshot.reply.content == "half"


def test_a_snapshot_without_a_stream_or_with_media_is_refused() -> None:
    with pytest.raises(ValueError, match="stream_id"):
        StreamSnapshot(_reply("half", stream_id=None))
    with pytest.raises(ValueError, match="media"):
        StreamSnapshot(_reply("half").model_copy(update={"media": ["a.png"]}))


def test_events_are_frozen_values() -> None:
    started = TypingStarted("slack", "C1")
    assert started == TypingStarted("slack", "C1")
    # Deliberately across types, which mypy takes for never equal: the test checks they are not.
    assert started != TypingStopped("slack", "C1")  # type: ignore[comparison-overlap]
    with pytest.raises(dataclasses.FrozenInstanceError):
        started.chat_id = "C2"  # type: ignore[misc]
    assert not hasattr(started, "__dict__")  # slotted


def _kind(event: OutboundEvent) -> str:
    match event:
        case TypingStarted():
            return "typing on"
        case TypingStopped():
            return "typing off"
        case StreamSnapshot():
            return "snapshot"
        case OutboundMessage():
            return "reply"
        case ReactionChanged():
            return "reaction"
        case ButtonsUsed():
            return "buttons used"


async def test_the_outbound_pipe_carries_every_kind_in_order() -> None:
    agent, publisher = create_bus(capacity=8)
    events: list[OutboundEvent] = [
        TypingStarted("telegram", "42"),
        StreamSnapshot(_reply("ha")),
        _reply("half and whole"),
        TypingStopped("telegram", "42"),
    ]
    for event in events:
        await agent.send(event)
    agent.close()

    received = [event async for event in publisher.outbound()]
    assert received == events
    assert [_kind(event) for event in received] == ["typing on", "snapshot", "reply", "typing off"]
