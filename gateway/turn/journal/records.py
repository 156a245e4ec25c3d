"""The journal's records, as they are written to the log (one compact JSON object each).

- `in`: an inbound message the gateway accepted, with its journal id (acknowledged to the
  platform once this is durable).
- `done`: a turn's outcome: the inbound ids it answers, the session it ran in, the messages to
  write to that session, the reply to deliver (None when there is none: a cancelled turn), and
  the turn as a `bus.Task`.
- `sent`: the reply of a turn was delivered (or given up on, with `failed`).
- `opened`: a platform message a turn's streamed reply opened (`OpenedPart`): the turn, the
  inbound ids it answers (as far as known when the message opened), the channel and chat, the
  part (the message's place in the reply, from 0) and the platform's id of it. A turn resumed
  after a crash finishes these messages in place instead of sending its reply again beside
  them; the turn's `sent` record retires them.
- `send`: a message the owner asked to send (`POST /v1/messages`, `OwnerSend`): its id, the
  chat, the text, when to send it, its idempotency key, and where it stands (`scheduled`,
  `queued`, `sent`, `failed`, `cancelled`; the turn id its reply was recorded under, the
  platform's ids or error). A checkpoint restates it whole while it is live or answerable.
- `sendst`: a `send` record's new standing (its status, turn, platform ids, error).
- `edit`: a user's edit of an accepted message whose turn had not started: its journal id,
  the message as edited (its text in place of the old, which the turn runs on), and the edit
  event's dedup key (a platform's retry of the same edit is one edit). A checkpoint restates
  the `in` record with the new text.
- `del`: a user deleted an accepted message whose turn had not started: its journal id; the
  message is answered by nothing and leaves the state.
- `offer`: the buttons of a chat's last reply (`ButtonOffer`), restated by checkpoints while
  they can be tapped: where a channel shows buttons as a numbered list, a reply of the number
  is their tap, also after a restart.
- `snap`: the first record of a checkpoint: the next journal id; the live `in`, `done`,
  `opened`, `sent`, `send` and `offer` records follow it (the dedup table is in a file of its
  own beside the log).

Extending: a record is a JSON object whose `k` names its kind. A reader takes the fields it
knows and ignores the others, and a kind it does not know folds to nothing
(`JournalState.apply`), so a field or a kind may be added without a new format: give a new
field a default its absence means (an older record, or a checkpoint restating one, lacks it),
and keep the field names short, as these are (every record carries them).

Records are written with every field (pydantic-core's `to_json` of the models, in Rust): the
domain's `to_dict` leaves defaults out, which makes pydantic call each default factory (a
UUIDv7, the time) to compare against, and costs three times as much on the hot path. A `done`
record's messages are the exception: they are their session lines (`Message.to_line`, which
leaves out what is None without comparing against factories), made once for the record and the
session file both. A record is encoded once and kept: a checkpoint restates the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic_core

from bus import Button, ButtonRows, InboundMessage, Message, OutboundMessage, Task
from gateway.turn.task import TurnTask


@dataclass(slots=True)
class Received:
    id: int
    message: InboundMessage
    at: float
    _encoded: bytes | None = field(default=None, repr=False, compare=False)

    def encode(self) -> bytes:
        if self._encoded is None:
            self._encoded = _dumps({"k": "in", "id": self.id, "at": self.at, "m": self.message})
        return self._encoded

    def replace(self, message: InboundMessage) -> None:
        """The message as its sender edited it (before its turn started): the lane that holds
        this record runs the turn on it, and a checkpoint restates it."""
        self.message = message
        self._encoded = None


@dataclass(frozen=True, slots=True)
class Edit:
    """An `edit` record: the accepted message `inbound_id` now reads as `message`; `key` is
    the edit event's dedup key, `at` when it came."""

    inbound_id: int
    message: InboundMessage
    key: str | None
    at: float

    def encode(self) -> bytes:
        return _dumps(
            {"k": "edit", "id": self.inbound_id, "m": self.message, "key": self.key, "at": self.at}
        )


def edit_from(record: Record) -> Edit:
    key = record.get("key")
    return Edit(
        int(record["id"]),
        InboundMessage.model_validate(record["m"]),
        None if key is None else str(key),
        float(record["at"]),
    )


def encode_deleted(inbound_id: int) -> bytes:
    return _dumps({"k": "del", "id": inbound_id})


@dataclass(slots=True)
class Outcome:
    turn: str
    answers: list[int]
    session: str
    messages: list[Message]
    reply: OutboundMessage | None
    task: TurnTask | None = None
    #: In memory only: the session file has these messages (written, maybe not yet synced).
    written: bool = False
    delivered: bool = False
    synced: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: In memory only: whether the outcome has a reply (still known once the reply is let go).
    replied: bool = field(init=False)
    _encoded: bytes | None = field(default=None, repr=False, compare=False)
    _lines: bytes | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.replied = self.reply is not None

    def settle(self) -> None:
        """Delivered and written: until the session files are synced only its record is
        needed (a checkpoint restates it), so the objects go and the bytes stay (fewer objects
        for the garbage collector to walk, less memory between checkpoints)."""
        self.encode()
        self.messages, self.reply, self.task = [], None, None
        self._lines = None  # the record holds them

    def session_lines(self) -> bytes:
        """The messages as their session file holds them (`Message.lines_of`), made once: the
        record holds the same bytes."""
        if self._lines is None:
            self._lines = Message.lines_of(self.messages)
        return self._lines

    def encode(self) -> bytes:
        if self._encoded is None:
            record: dict[str, Any] = {
                "k": "done",
                "turn": self.turn,
                "ids": self.answers,
                "session": self.session,
            }
            if self.reply is not None:
                record["reply"] = self.reply
            # The messages and the task as their own bytes, the last fields: the object's
            # closing brace moves after them (`to_json` writes no white space). A session
            # line is one JSON object and holds no raw newline, so the lines joined by commas
            # are the array.
            parts = [
                _dumps(record)[:-1],
                b',"msgs":[',
                self.session_lines()[:-1].replace(b"\n", b","),
                b"]",
            ]
            if self.task is not None:
                parts += (b',"task":', self.task.wire_json())
            parts.append(b"}")
            self._encoded = b"".join(parts)
        return self._encoded


def encode_sent(turn: str, *, failed: bool = False) -> bytes:
    record: dict[str, Any] = {"k": "sent", "turn": turn}
    if failed:
        record["failed"] = True
    return _dumps(record)


@dataclass(frozen=True, slots=True)
class OpenedPart:
    """A platform message a streamed reply opened (an `opened` record)."""

    turn: str
    #: The journal ids of the inbound messages the turn answers.
    answers: tuple[int, ...]
    channel: str
    chat_id: str
    #: The message's place in the reply (0: its first message).
    part: int
    platform_id: str

    def encode(self) -> bytes:
        return _dumps(
            {
                "k": "opened",
                "turn": self.turn,
                "ids": list(self.answers),
                "ch": self.channel,
                "chat": self.chat_id,
                "part": self.part,
                "msg": self.platform_id,
            }
        )


def opened_from(record: Record) -> OpenedPart:
    return OpenedPart(
        turn=str(record["turn"]),
        answers=tuple(int(i) for i in record.get("ids", ())),
        channel=str(record["ch"]),
        chat_id=str(record["chat"]),
        part=int(record["part"]),
        platform_id=str(record["msg"]),
    )


SendStatus = Literal["scheduled", "queued", "sent", "failed", "cancelled"]
#: The standings a send can still leave: it may be cancelled, and it will be sent.
OPEN_SEND_STATUSES: frozenset[str] = frozenset({"scheduled", "queued"})


@dataclass(slots=True)
class OwnerSend:
    """A message the owner sent into a chat (a `send` record), and where it stands."""

    id: str
    channel: str
    chat_id: str
    text: str
    #: When it was asked for (seconds since the epoch).
    at: float
    #: When to send it (seconds since the epoch); None: at once.
    due: float | None
    key: str | None
    #: Appended to the chat's session once sent (`session: append`).
    append: bool
    status: SendStatus
    #: The turn id its reply was recorded under (its `done` record), once it was.
    turn: str | None = None
    platform_ids: list[str] = field(default_factory=list)
    error: str | None = None
    #: When it reached its last status (sent, failed, cancelled).
    ended_at: float | None = None

    def encode(self) -> bytes:
        return _dumps(
            {
                "k": "send",
                "id": self.id,
                "ch": self.channel,
                "chat": self.chat_id,
                "text": self.text,
                "at": self.at,
                "due": self.due,
                "key": self.key,
                "append": self.append,
                **self._standing_fields(),
            }
        )

    def standing(self) -> bytes:
        """Its `sendst` record: where it stands now."""
        return _dumps({"k": "sendst", "id": self.id, **self._standing_fields()})

    def _standing_fields(self) -> Record:
        """Where it stands, as both its records end (`take_standing` reads them back)."""
        return {
            "st": self.status,
            "turn": self.turn,
            "pids": self.platform_ids,
            "err": self.error,
            "end": self.ended_at,
        }

    def take_standing(self, record: Record) -> None:
        self.status = _send_status(record["st"])
        self.turn = _optional_str(record.get("turn"))
        self.platform_ids = [str(i) for i in record.get("pids") or ()]
        self.error = _optional_str(record.get("err"))
        end = record.get("end")
        self.ended_at = None if end is None else float(end)


def owner_send_from(record: Record) -> OwnerSend:
    due = record.get("due")
    send = OwnerSend(
        id=str(record["id"]),
        channel=str(record["ch"]),
        chat_id=str(record["chat"]),
        text=str(record["text"]),
        at=float(record["at"]),
        due=None if due is None else float(due),
        key=_optional_str(record.get("key")),
        append=bool(record.get("append", True)),
        status="queued",
    )
    send.take_standing(record)
    return send


def _send_status(value: object) -> SendStatus:
    if value not in ("scheduled", "queued", "sent", "failed", "cancelled"):
        raise ValueError(f"unknown send status {value!r}")
    return value


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class ButtonOffer:
    """The buttons of a chat's last reply (an `offer` record, written only in checkpoints: the
    `done` record of the reply holds them until then). `message_id` names the reply to a tap
    by its number: the turn's id."""

    channel: str
    chat_id: str
    message_id: str
    buttons: ButtonRows
    #: When the reply was made, seconds since the epoch.
    at: float

    def encode(self) -> bytes:
        return _dumps(
            {
                "k": "offer",
                "ch": self.channel,
                "chat": self.chat_id,
                "msg": self.message_id,
                "at": self.at,
                "b": [[button.to_dict() for button in row] for row in self.buttons],
            }
        )


def offer_from(record: Record) -> ButtonOffer:
    return ButtonOffer(
        channel=str(record["ch"]),
        chat_id=str(record["chat"]),
        message_id=str(record["msg"]),
        buttons=[[Button.model_validate(b) for b in row] for row in record.get("b", [])],
        at=float(record["at"]),
    )


def encode_snapshot(next_id: int) -> bytes:
    return _dumps({"k": "snap", "next": next_id})


Record = dict[str, Any]


def decode(payload: bytes) -> Record:
    record = json.loads(payload)
    if not isinstance(record, dict) or not isinstance(record.get("k"), str):
        raise ValueError("a journal record must be an object with a kind")
    return record


def received_from(record: Record) -> Received:
    return Received(
        int(record["id"]), InboundMessage.model_validate(record["m"]), float(record["at"])
    )


def outcome_from(record: Record) -> Outcome:
    reply = record.get("reply")
    task = record.get("task")
    return Outcome(
        turn=str(record["turn"]),
        answers=[int(i) for i in record["ids"]],
        session=str(record["session"]),
        messages=[Message.model_validate(m) for m in record.get("msgs", [])],
        reply=None if reply is None else OutboundMessage.model_validate(reply),
        task=None if task is None else TurnTask.from_task(Task.model_validate(task)),
    )


def _dumps(record: dict[str, Any]) -> bytes:
    return pydantic_core.to_json(record)
