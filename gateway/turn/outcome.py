"""A turn's outcome: what the turn core made of a chat's messages, and the log that keeps it.

`Answer` is what the core made of one message, or of several collected into one turn: a stop's
reply, a command's, or an agent turn's (`TurnRunner.answer`). The reply that carries it is built
here once (`reply_to_answer`), in one process and in a cluster alike.

Where the outcome is durable before its reply goes out is a `TurnLog`, with two
implementations: the profile's journal in one process (`gateway.turn.dispatcher.JournalTurnLog`:
an outcome record, the session file written behind it, the reply on the bus), and in a cluster
the turn's row in PostgreSQL with the session's messages in the same transaction, the reply
published to the outbound stream (`gateway.cluster.worker.ClusterTurnLog`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from bus import (
    Attachment,
    ButtonRows,
    InboundMessage,
    Message,
    OutboundMessage,
    SessionKey,
    TokenUsage,
)
from bus.abort import abort_response
from gateway.turn.reply import platform_ids, reply_message


@dataclass(frozen=True, slots=True)
class Answer:
    """What the turn core made of a chat's messages."""

    text: str
    session_key: SessionKey
    #: What the session gains: the user's message, and the reply unless the turn failed;
    #: nothing for a stop or a command.
    messages: list[Message]
    #: An agent turn (its reply may stream, it has a task), not a command or notice.
    is_turn: bool = True
    #: The agent failed: `text` is the apology (in a cluster the message is tried again).
    failed: bool = False
    error: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    #: The agent's buttons under the reply.
    buttons: ButtonRows = field(default_factory=list)
    #: The reply's files, kept under the profile's directory, sent after `text`.
    attachments: list[Attachment] = field(default_factory=list)

    @classmethod
    def said(cls, key: SessionKey, text: str) -> Answer:
        """A stop's or a command's answer: a reply, nothing for the session."""
        return cls(text, key, [], is_turn=False)


def stop_answer(message: InboundMessage, key: SessionKey) -> Answer:
    """A stop is answered in the language of its word; the turn it stops is cancelled."""
    return Answer.said(key, abort_response(message.content))


def reply_to_answer(
    messages: Sequence[InboundMessage], answer: Answer, turn_id: str, *, streamed: bool
) -> OutboundMessage:
    """The reply to the last of `messages`, naming every message it answers; a turn's reply
    is the final of the stream its snapshots showed (`streamed`: the turn's id is its stream's)."""
    return reply_message(
        messages[-1],
        answer.text,
        answers=platform_ids(messages),
        session=str(answer.session_key),
        failed=answer.failed,
        delivery_id=turn_id,
        stream_id=turn_id if streamed and answer.is_turn else None,
        buttons=answer.buttons,
        usage=answer.usage,
        attachments=answer.attachments,
    )


#: How a log names the messages a turn answers (the journal's records, the cluster's stream).
Answered = TypeVar("Answered")


@dataclass(frozen=True, slots=True)
class TurnOutcome(Generic[Answered]):
    """A turn answered: what it answers, the answer, and the reply built for it."""

    turn_id: str
    answered: Sequence[Answered]
    answer: Answer
    reply: OutboundMessage


class TurnLog(Protocol[Answered]):
    """Where a profile's turns are durable, and their replies handed on from."""

    async def record(self, outcome: TurnOutcome[Answered]) -> None:
        """Durable: the reply, the session's new messages, and that `answered` is answered;
        the session gains its messages behind it."""
        ...

    async def deliver(self, reply: OutboundMessage) -> None:
        """Hand a recorded reply on to the channels."""
        ...
