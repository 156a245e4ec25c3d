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


#: Outbound metadata key of a control message: "start" shows "typing" in the chat until the
#: turn's final reply (or a "stop") arrives. Carries no content and is never sent as text.
TYPING = "octos.typing"


#: Outbound metadata keys the gateway sets on a turn's replies: the platform message ids the
#: reply answers (several when queued messages were collected into one turn), the session it
#: belongs to, and whether the text is an apology for a failed turn rather than an answer.
ANSWERS = "octos.answers"
SESSION = "octos.session"
FAILED = "octos.failed"


class OutboundMessage(WireModel):
    """A reply on its way to a platform.

    A streamed reply is a series of outbound messages that share `stream_id`: each carries the
    whole text so far (a snapshot, never a delta, so a lost or merged update does no harm), and
    the last one has `stream_final` set. A message without `stream_id` is a whole reply.
    """

    channel: str
    chat_id: str
    content: str
    reply_to: str | None = None
    media: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    stream_id: str | None = None
    stream_final: bool = True
    #: Stable across re-deliveries after a crash (the turn's id, then `.N` for the N-th part
    #: the splitter made): a platform with an idempotency key (Discord nonce, Matrix txnId,
    #: LINE X-Line-Retry-Key) derives it from this, so a resend is not shown twice.
    delivery_id: str | None = None

    @property
    def is_stream_snapshot(self) -> bool:
        return self.stream_id is not None and not self.stream_final

    @classmethod
    def typing(cls, channel: str, chat_id: str, *, active: bool = True) -> OutboundMessage:
        """A control message that starts or stops the typing indicator of a chat."""
        return cls(
            channel=channel,
            chat_id=chat_id,
            content="",
            metadata={TYPING: "start" if active else "stop"},
        )

    @property
    def typing_signal(self) -> bool | None:
        """True to start typing, False to stop, None when this is an ordinary message."""
        value = self.metadata.get(TYPING)
        return None if value is None else value == "start"
