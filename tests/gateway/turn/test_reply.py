"""The reply builder and the command apology, shared by one process and the cluster."""

from __future__ import annotations

import pytest
import structlog.testing

from bus import ANSWERS, FAILED, SESSION, InboundMessage, OutboundMessage
from gateway.turn.reply import command_reply, platform_ids, reply_message


def inbound(message_id: str | None, content: str = "hi") -> InboundMessage:
    return InboundMessage(
        channel="telegram", sender_id="1", chat_id="c1", content=content, message_id=message_id
    )


def test_a_reply_answers_its_trigger_and_names_every_message_it_answers() -> None:
    messages = [inbound("1"), inbound(None), inbound("3")]
    reply = reply_message(
        messages[-1],
        "bad \udc80 byte",
        answers=platform_ids(messages),
        session="p:telegram:c1",
        delivery_id="turn-1",
        stream_id="turn-1",
    )
    assert reply == OutboundMessage(
        channel="telegram",
        chat_id="c1",
        content="bad \ufffd\ufffd\ufffd byte",  # no JSON encoder or file takes a lone surrogate
        reply_to="3",
        metadata={ANSWERS: ["1", "3"], SESSION: "p:telegram:c1"},
        stream_id="turn-1",
        delivery_id="turn-1",
    )
    assert reply.answered_ids() == ["3", "1"]


def test_a_notice_without_ids_or_session_carries_only_what_it_has() -> None:
    reply = reply_message(inbound(None), "sorry", answers=[], failed=True)
    assert reply.metadata == {FAILED: True}
    assert reply.reply_to is None
    assert reply.answered_ids() == []


async def test_a_failing_command_is_answered_with_the_reason() -> None:
    async def failing() -> str:
        raise RuntimeError("the disk is full")

    with structlog.testing.capture_logs() as logs:
        text = await command_reply("/new", failing())
    assert text == (
        "Sorry, I could not answer that: RuntimeError: the disk is full. Please try again later."
    )
    assert [(entry["event"], entry["command"]) for entry in logs] == [
        ("turn.command_failed", "/new")
    ]


async def test_a_command_that_works_is_answered_with_its_text() -> None:
    async def working() -> str:
        return "Back to 'default'."

    assert await command_reply("/back", working()) == "Back to 'default'."


@pytest.mark.parametrize("answers", [["9"], ["9", "8"]])
def test_answered_ids_put_reply_to_first_and_never_twice(answers: list[str]) -> None:
    reply = OutboundMessage(
        channel="qq", chat_id="c", content="x", reply_to="9", metadata={ANSWERS: answers}
    )
    assert reply.answered_ids() == ["9", *[a for a in reversed(answers) if a != "9"]]
