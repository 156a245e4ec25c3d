"""What travels in a NATS message: the envelope's JSON body and its headers, in one place.

The body is the message's own pydantic JSON (the same wire form the journal writes); the headers
say what the receiver needs before it parses the body: the profile, the inbound id that makes
redelivery and platform retries harmless, where a reply goes, and which ingress shows a turn's
live events (`gateway.cluster.live`: stream snapshots, typing signals, the bot's reactions and
used buttons taken off, over core NATS).

What became of one reply an ingress delivered (`Delivered`) is here too: the delivery loops
and hand-overs both pass it on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias, TypeVar

from pydantic import TypeAdapter

from bus import (
    ButtonsUsed,
    InboundMessage,
    OutboundMessage,
    ReactionChanged,
    StreamSnapshot,
    TypingStarted,
    TypingStopped,
)


@dataclass(frozen=True, slots=True)
class Delivered:
    """What became of one reply: the platform ids of its messages, or why it was given up."""

    platform_ids: tuple[str, ...] = ()
    #: Set when the delivery layer gave up on it (logged and counted there): its error.
    given_up: str | None = None
    #: With `given_up`: the delivery layer's reason (`expired`, `auth`, `too_long`, ...).
    reason: str | None = None


#: JetStream's own deduplication header.
MSG_ID = "Nats-Msg-Id"
PROFILE = "Octos-Profile"
#: The stable id of an inbound message: its platform id, or a random one when it has none.
INBOUND_ID = "Octos-Inbound-Id"
#: Set when the channel holds a request open for the reply (the HTTP API): a retry is answered
#: with the stored reply, and the reply goes to the subject in `REPLY_SUBJECT`.
REQUEST = "Octos-Request"
REPLY_SUBJECT = "Octos-Reply-Subject"
#: On an owner's send in a chat's partition (`gateway.cluster.sends`): its id. Its text is the
#: message's content, never triaged: it is sent as it is, not answered.
SEND = "Octos-Send"
#: Dead letters: why, and where the message was.
DEAD_REASON = "Octos-Dead-Reason"
DEAD_SUBJECT = "Octos-Dead-Subject"
DEAD_DELIVERIES = "Octos-Dead-Deliveries"
#: What a dead letter is: `DEAD_REPLY` for a reply an ingress gave up on (its reason is then the
#: delivery layer's label, `expired`, `auth`, ..., and the platform's error is in `DEAD_ERROR`);
#: none for an inbound message that kept failing.
DEAD_KIND = "Octos-Dead-Kind"
DEAD_REPLY = "reply"
DEAD_ERROR = "Octos-Dead-Error"
#: The ingress process that took an inbound message in, and what its channel shows while a
#: turn runs (`stream`, `typing`) and whether it takes a tapped message's buttons off
#: (`buttons`): the turn's live events go to that ingress.
INGRESS = "Octos-Ingress"
LIVE = "Octos-Live"
#: On a reply whose turn sent live events: the ingress that showed them, which delivers it.
LIVE_AT = "Octos-Live-At"
#: On a live event: the reply (its `Nats-Msg-Id`) of the same chat it is shown after.
LIVE_AFTER = "Octos-Live-After"
#: What a message on a live subject is: one of `LIVE_KINDS`, or `final` (a reply handed over).
LIVE_KIND = "Octos-Live-Kind"
FINAL = "final"

ChatSignal: TypeAlias = TypingStarted | TypingStopped | ReactionChanged | ButtonsUsed
LiveSignal: TypeAlias = StreamSnapshot | ChatSignal
"""A running turn's event for the chat that is not its reply: shown, never stored."""
LIVE_KINDS: dict[str, type[ChatSignal]] = {
    "typing-started": TypingStarted,
    "typing-stopped": TypingStopped,
    "reaction": ReactionChanged,
    "buttons-used": ButtonsUsed,
}
SNAPSHOT = "snapshot"
#: Each kind's reader: the signal's fields as JSON, their types checked.
_READERS: dict[str, Callable[[bytes], ChatSignal]] = {
    name: TypeAdapter(kind).validate_json for name, kind in LIVE_KINDS.items()
}

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


class _MessageBody:
    """Either envelope's body: its message's own pydantic JSON (`_parse` reads it back)."""

    __slots__ = ()
    message: InboundMessage | OutboundMessage

    def body(self) -> bytes:
        return self.message.model_dump_json().encode("utf-8")


# What the envelopes share is `_MessageBody`.
@dataclass(frozen=True, slots=True)
class InboundEnvelope(_MessageBody):
    profile: str
    inbound_id: str
    message: InboundMessage
    #: The channel holds a request open for the reply; `reply_subject` is where it waits.
    request: bool = False
    reply_subject: str | None = None
    #: The ingress that took it in, and whether its channel shows snapshots and typing.
    ingress: str | None = None
    streams: bool = False
    shows_typing: bool = False
    #: Whether its channel shows buttons on the message and can take them off after a tap
    #: (`Channel.buttons_shown` is "attached").
    buttons_attached: bool = False
    #: An owner's send (its id), not a user's message.
    send: str | None = None

    @property
    def live_at(self) -> str | None:
        """The ingress that shows this message's turn live, if its channel shows anything."""
        return self.ingress if self.streams or self.shows_typing else None

    def headers(self, msg_id: str) -> dict[str, str]:
        headers = {MSG_ID: msg_id, PROFILE: self.profile, INBOUND_ID: self.inbound_id}
        if self.request:
            headers[REQUEST] = "1"
        if self.reply_subject is not None:
            headers[REPLY_SUBJECT] = self.reply_subject
        if self.ingress is not None:
            headers[INGRESS] = self.ingress
            shows = (
                ("stream", self.streams),
                ("typing", self.shows_typing),
                ("buttons", self.buttons_attached),
            )
            headers[LIVE] = ",".join(name for name, on in shows if on)
        if self.send is not None:
            headers[SEND] = self.send
        return headers

    @classmethod
    def decode(cls, headers: dict[str, str] | None, body: bytes) -> InboundEnvelope:
        headers = _carrying(headers, "inbound message", PROFILE, INBOUND_ID)
        shows = headers.get(LIVE, "").split(",")
        return cls(
            headers[PROFILE],
            headers[INBOUND_ID],
            _parse(InboundMessage, body),
            request=headers.get(REQUEST) == "1",
            reply_subject=headers.get(REPLY_SUBJECT),
            ingress=headers.get(INGRESS),
            streams="stream" in shows,
            shows_typing="typing" in shows,
            buttons_attached="buttons" in shows,
            send=headers.get(SEND),
        )


@dataclass(frozen=True, slots=True)
class OutboundEnvelope(_MessageBody):
    profile: str
    message: OutboundMessage
    #: The ingress that showed the turn's live events: the reply is delivered there.
    live_at: str | None = None

    def headers(self, msg_id: str) -> dict[str, str]:
        headers = {MSG_ID: msg_id, PROFILE: self.profile}
        if self.live_at is not None:
            headers[LIVE_AT] = self.live_at
        return headers

    @classmethod
    def decode(cls, headers: dict[str, str] | None, body: bytes) -> OutboundEnvelope:
        headers = _carrying(headers, "outbound message", PROFILE)
        return cls(headers[PROFILE], _parse(OutboundMessage, body), live_at=headers.get(LIVE_AT))


def live_signal_message(
    profile: str, signal: LiveSignal, *, after: str | None = None
) -> tuple[dict[str, str], bytes]:
    """The headers and body of a live event on its ingress's live subject; `after`: the
    message id of the reply it must be shown after (`LIVE_AFTER`)."""
    headers = {PROFILE: profile}
    if after is not None:
        headers[LIVE_AFTER] = after
    if isinstance(signal, StreamSnapshot):
        headers[LIVE_KIND] = SNAPSHOT
        return headers, signal.reply.model_dump_json().encode()
    headers[LIVE_KIND] = next(
        name for name, type_ in LIVE_KINDS.items() if isinstance(signal, type_)
    )
    return headers, json.dumps(dataclasses.asdict(signal)).encode("utf-8")


def decode_live_signal(headers: dict[str, str], body: bytes) -> tuple[str, LiveSignal]:
    """(profile, event) of a live event; `CodecError` when it is not one this build reads."""
    headers = _carrying(headers, "live event", PROFILE)
    profile, kind = headers[PROFILE], headers.get(LIVE_KIND)
    if kind == SNAPSHOT:
        try:
            return profile, StreamSnapshot(_parse(OutboundMessage, body))
        except ValueError as error:
            raise CodecError(f"not a stream snapshot: {error}") from error
    read = _READERS.get(kind or "")
    if read is None:
        raise CodecError(f"unknown live event kind {kind!r}")
    try:
        return profile, read(body)
    except ValueError as error:
        raise CodecError(f"not a readable {kind} event: {error}") from error


def _carrying(headers: dict[str, str] | None, what: str, *names: str) -> dict[str, str]:
    """A message's headers (none: empty), which must hold each of `names`: a `what` without one
    is a `CodecError` naming it."""
    headers = headers or {}
    for name in names:
        if name not in headers:
            raise CodecError(f"{what} without the {name} header")
    return headers


def _parse(model: type[EnvelopeT], body: bytes) -> EnvelopeT:
    try:
        return model.model_validate_json(body)
    except ValueError as error:
        raise CodecError(f"not a readable {model.__name__}: {error}") from error
