"""What crosses the bus: messages from platforms in, replies to platforms out."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from bus.message import WireModel, utc_now
from bus.session_key import SessionKey


class InboundMessage(WireModel):
    """A message a channel received from a platform user."""

    channel: str
    sender_id: str
    chat_id: str
    content: str
    timestamp: datetime = Field(default_factory=utc_now)
    media: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    message_id: str | None = None

    def session_key(self, profile: str | None = None, topic: str | None = None) -> SessionKey:
        return SessionKey.for_chat(profile, self.channel, self.chat_id, topic)


#: Outbound metadata keys the gateway sets on a turn's replies: the platform message ids the
#: reply answers (several when queued messages were collected into one turn), the session it
#: belongs to, and whether the text is an apology for a failed turn rather than an answer.
ANSWERS = "octos.answers"
SESSION = "octos.session"
FAILED = "octos.failed"
#: Set on a dead letter sent again (`octos-gateway dead-letters retry`): when that was (seconds
#: since the epoch), from which its delivery deadline counts instead of from its turn.
SENT_AGAIN_AT = "octos.sent_again_at"


class OutboundMessage(WireModel):
    """A reply on its way to a platform.

    A message without `stream_id` is a whole reply. With one, it is the final text of a streamed
    reply: the snapshots before it (`bus.outbound.StreamSnapshot`) carry the same `stream_id`,
    so a channel that showed them edits that message into this final text.
    """

    channel: str
    chat_id: str
    content: str
    reply_to: str | None = None
    media: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    stream_id: str | None = None
    #: Stable across re-deliveries after a crash (the turn's id, then `.N` for the N-th part
    #: the splitter made): a platform with an idempotency key (Discord nonce, Matrix txnId,
    #: LINE X-Line-Retry-Key) derives it from this, so a resend is not shown twice.
    delivery_id: str | None = None

    def answered_ids(self) -> list[str]:
        """The platform ids of the messages this answers: `reply_to`, then the `ANSWERS` ids
        newest first (the first part of a long reply has `reply_to`, every part has `ANSWERS`).
        Platforms that accept only replies (QQ) or answer through the inbound message's handle
        (the WeCom AI bot's `req_id`) look their handle up by these."""
        ids: list[str] = []
        if self.reply_to:
            ids.append(self.reply_to)
        answers = self.metadata.get(ANSWERS)
        if isinstance(answers, list):
            ids.extend(str(answer) for answer in reversed(answers) if answer and answer not in ids)
        return ids
