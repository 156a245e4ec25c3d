"""The reply: what answers a message, as the `OutboundMessage` the channels send.

Every reply names what it answers the same way, whoever built it (a turn, a command, a notice,
one process or the cluster): `reply_to` is the message it answers (the last, for messages
collected into one turn), the `ANSWERS` metadata every platform id it answers, `SESSION` the
session it belongs to, and `FAILED` marks an apology rather than an answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable

import structlog

from bus import ANSWERS, CALLBACK, FAILED, SESSION, ButtonRows, InboundMessage, OutboundMessage
from bus.text import scrub_surrogates

log = structlog.get_logger(__name__)

FAILED_TURN_REPLY = "Sorry, I could not answer that: {reason}. Please try again later."
#: What a request held open for a message that a stop or an interrupt dropped is answered.
CANCELLED_NOTICE = "Cancelled: a stop or a newer message ended this turn before its reply."


def reply_message(
    trigger: InboundMessage,
    text: str,
    *,
    answers: list[str],
    session: str | None = None,
    failed: bool = False,
    delivery_id: str | None = None,
    stream_id: str | None = None,
    buttons: ButtonRows | None = None,
) -> OutboundMessage:
    """The reply to `trigger` saying `text`; `answers` are the platform ids of every message it
    answers (`platform_ids`). `delivery_id` keeps a resend from showing twice (a turn's id);
    `stream_id` makes it a snapshot or the final text of the turn's streamed reply; `buttons`
    go under it."""
    metadata: dict[str, object] = {ANSWERS: answers} if answers else {}
    if session is not None:
        metadata[SESSION] = session
    if failed:
        metadata[FAILED] = True
    return OutboundMessage(
        channel=trigger.channel,
        chat_id=trigger.chat_id,
        content=scrub_surrogates(text),
        # A tap's id names an interaction, which no platform lets a message reply to.
        reply_to=None if CALLBACK in trigger.metadata else trigger.shown_id(),
        metadata=metadata,
        stream_id=stream_id,
        delivery_id=delivery_id,
        buttons=buttons or [],
    )


def platform_ids(messages: Iterable[InboundMessage]) -> list[str]:
    """The platform ids of `messages`, in order (a message without one has none to answer;
    an edit answers the message it edits)."""
    return [shown for message in messages if (shown := message.shown_id())]


def failure_reason(error: Exception) -> str:
    """What the user and the turn's record are told of `error`."""
    return f"{type(error).__name__}: {error}"


def failed_reply(error: Exception) -> str:
    """The apology for a turn or a command that raised `error`, naming the reason."""
    return FAILED_TURN_REPLY.format(reason=failure_reason(error))


async def command_reply(name: str, running: Awaitable[str]) -> str:
    """The reply of the command `name` as `running` gives it, or the apology when it fails: a
    command is always answered, never left open."""
    try:
        return await running
    except Exception as error:
        # Supervision point (per message): the user is told, the operator gets the traceback.
        log.exception("turn.command_failed", command=name)
        return failed_reply(error)
