"""Which inbound messages an outbound one answers, for platforms whose replies must name one.

The first message of a reply has `reply_to`; every message of a turn's reply carries the ids it
answers in the `octos.answers` metadata (several when queued messages were collected into one
turn). Platforms that accept only replies (QQ) or answer through the inbound message's handle
(the WeCom AI bot's `req_id`) look their handle up by these ids.
"""

from __future__ import annotations

from bus import OutboundMessage
from bus.envelope import ANSWERS


def answered_ids(message: OutboundMessage) -> list[str]:
    """The platform ids of the messages `message` answers: `reply_to`, then the newest first."""
    ids: list[str] = []
    if message.reply_to:
        ids.append(message.reply_to)
    answers = message.metadata.get(ANSWERS)
    if isinstance(answers, list):
        ids.extend(str(answer) for answer in reversed(answers) if answer and answer not in ids)
    return ids
