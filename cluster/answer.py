"""What a worker's profile made of an inbound message (`Answer`), and the reply sent for it.

The reply to a collected turn goes to the last of its messages and names every message it
answers, as one process answers a collected turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bus import InboundMessage, Message, OutboundMessage, TokenUsage
from gateway.turn.reply import platform_ids, reply_message


@dataclass(frozen=True, slots=True)
class Answer:
    """What a profile made of one inbound message."""

    text: str
    session_key: str
    #: What the session gains (the user's message and the reply; nothing for a command).
    messages: list[Message]
    #: An agent turn (its reply may stream, it has a task), not a command or notice.
    is_turn: bool = True
    #: The agent failed: the message is tried again, and buried after the last try.
    failed: bool = False
    error: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)


def reply_to_answer(
    messages: Sequence[InboundMessage], answer: Answer, turn_id: str, *, streamed: bool
) -> OutboundMessage:
    """The reply to the last of `messages`, naming every message it answers."""
    return reply_message(
        messages[-1],
        answer.text,
        answers=platform_ids(messages),
        session=answer.session_key,
        delivery_id=turn_id,
        # The final of the stream the turn's snapshots showed (the turn's id is its stream's).
        stream_id=turn_id if streamed and answer.is_turn else None,
    )
