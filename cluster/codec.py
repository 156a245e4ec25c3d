"""What travels in a JetStream message: the envelope's JSON body and its headers, in one place.

The body is the message's own pydantic JSON (the same wire form the journal writes); the headers
say what the receiver needs before it parses the body: the profile, the inbound id that makes
redelivery and platform retries harmless, and where a reply goes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TypeVar

from bus import InboundMessage, OutboundMessage

#: JetStream's own deduplication header.
MSG_ID = "Nats-Msg-Id"
PROFILE = "Octos-Profile"
#: The stable id of an inbound message: its platform id, or a random one when it has none.
INBOUND_ID = "Octos-Inbound-Id"
#: Set when the channel holds a request open for the reply (the HTTP API): a retry is answered
#: with the stored reply, and the reply goes to the subject in `REPLY_SUBJECT`.
REQUEST = "Octos-Request"
REPLY_SUBJECT = "Octos-Reply-Subject"
#: Dead letters: why, and where the message was.
DEAD_REASON = "Octos-Dead-Reason"
DEAD_SUBJECT = "Octos-Dead-Subject"
DEAD_DELIVERIES = "Octos-Dead-Deliveries"

EnvelopeT = TypeVar("EnvelopeT", InboundMessage, OutboundMessage)


class CodecError(ValueError):
    """A message on a stream that this build cannot read (another version, or not ours)."""


def platform_id(profile: str, message: InboundMessage) -> str | None:
    """(profile, channel, chat, native id) as one header-safe token; None without a native id.

    Hashed: a chat id or a message id may hold any character, a header may not.
    """
    if message.message_id is None:
        return None
    key = "\x1f".join((profile, message.channel, message.chat_id, message.message_id))
    return hashlib.blake2b(key.encode("utf-8"), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class InboundEnvelope:
    profile: str
    inbound_id: str
    message: InboundMessage
    #: The channel holds a request open for the reply; `reply_subject` is where it waits.
    request: bool = False
    reply_subject: str | None = None

    def headers(self, msg_id: str) -> dict[str, str]:
        headers = {MSG_ID: msg_id, PROFILE: self.profile, INBOUND_ID: self.inbound_id}
        if self.request:
            headers[REQUEST] = "1"
        if self.reply_subject is not None:
            headers[REPLY_SUBJECT] = self.reply_subject
        return headers

    def body(self) -> bytes:
        return self.message.model_dump_json().encode("utf-8")

    @classmethod
    def decode(cls, headers: dict[str, str] | None, body: bytes) -> InboundEnvelope:
        headers = headers or {}
        try:
            profile, inbound_id = headers[PROFILE], headers[INBOUND_ID]
        except KeyError as missing:
            raise CodecError(f"inbound message without the {missing} header") from None
        return cls(
            profile,
            inbound_id,
            _parse(InboundMessage, body),
            request=headers.get(REQUEST) == "1",
            reply_subject=headers.get(REPLY_SUBJECT),
        )


@dataclass(frozen=True, slots=True)
class OutboundEnvelope:
    profile: str
    message: OutboundMessage

    def headers(self, msg_id: str) -> dict[str, str]:
        return {MSG_ID: msg_id, PROFILE: self.profile}

    def body(self) -> bytes:
        return self.message.model_dump_json().encode("utf-8")

    @classmethod
    def decode(cls, headers: dict[str, str] | None, body: bytes) -> OutboundEnvelope:
        profile = (headers or {}).get(PROFILE)
        if profile is None:
            raise CodecError(f"outbound message without the {PROFILE} header")
        return cls(profile, _parse(OutboundMessage, body))


def _parse(model: type[EnvelopeT], body: bytes) -> EnvelopeT:
    try:
        return model.model_validate_json(body)
    except ValueError as error:
        raise CodecError(f"not a readable {model.__name__}: {error}") from error
