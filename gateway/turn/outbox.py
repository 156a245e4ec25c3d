"""The owner's sends: messages nobody asked for (a reminder, a finished build), sent into a chat.

`POST /v1/messages` (`gateway.daemon.http_server`) hands a `SendRequest` to the profile's
`Outbox`, which answers once the request is a `send` record in the profile's journal (never
before it is synced): from there it is sent exactly as a turn's reply is. When it is due (at
once, or at its `send_at`) it waits in its chat's lane behind the turns already there, so it
never overtakes a reply being made; its turn records it as an outcome (the text appended to the
chat's session as the assistant's, with `session: append`) and the channel manager delivers it
under the one retry policy; the delivery hook tells the journal its platform ids, or the
platform's reason for refusing it.

Exactly once: an idempotency key names one send for 24 hours (the journal's records and its
checkpoints keep the keys, so a restart keeps them too); a scheduled send is in the journal,
so a restart schedules it again, and one whose time passed while the daemon was down is sent
at start, once, its lateness logged. A send's status is answerable for 24 hours after it ended.

The allow list does not apply: the owner sends, not a user.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import structlog
from pydantic import BaseModel, ConfigDict, Field, field_validator

from bus import SESSION, Message, OutboundMessage, SessionKey, new_turn_id
from bus.text import scrub_surrogates
from channels.errors import DeliveryError
from gateway.turn.journal import OPEN_SEND_STATUSES, Journal, OwnerSend
from sessions.wal import LogWriteError

log = structlog.get_logger(__name__)

#: A send the scheduler queues this long after its time is logged as late (one whose time
#: passed while the daemon was down always is).
LATE_AFTER_S = 1.0
#: Longest idempotency key and text accepted.
MAX_KEY_CHARS = 200
MAX_TEXT_CHARS = 100_000

Clock = Callable[[], float]


class SendRequest(BaseModel):
    """The body of `POST /v1/messages`, checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str = Field(min_length=1)
    channel: str = Field(min_length=1)
    chat_id: str = Field(min_length=1, max_length=500)
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    attachments: list[Any] = Field(default_factory=list)
    buttons: list[Any] = Field(default_factory=list)
    send_at: datetime | None = None
    idempotency_key: str | None = Field(None, min_length=1, max_length=MAX_KEY_CHARS)
    session: Literal["append", "none"] = "append"

    @field_validator("chat_id", mode="before")
    @classmethod
    def _chat_as_text(cls, value: object) -> object:
        # A numeric chat id (Telegram's) is the same chat written without quotes.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("send_at")
    @classmethod
    def _with_offset(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.utcoffset() is None:
            raise ValueError("send_at needs a time zone (2026-12-05T09:00:00+01:00, or Z)")
        return value

    def unsupported(self) -> str | None:
        """What this gateway cannot send yet, said to the client (a 400)."""
        if self.attachments:
            return "attachments are not supported yet: send text only"
        if self.buttons:
            return "buttons are not supported yet: send text only"
        return None


def status_of(send: OwnerSend) -> dict[str, object]:
    """What `GET /v1/messages/{id}` answers."""
    return {
        "id": send.id,
        "status": send.status,
        "channel": send.channel,
        "chat_id": send.chat_id,
        "send_at": send.due,
        "platform_ids": list(send.platform_ids),
        "error": send.error,
    }


def owner_reply(send: OwnerSend, session: SessionKey, turn: str) -> OutboundMessage:
    """The message a send becomes: a reply to nothing, in `session`, delivered as `turn`."""
    return OutboundMessage(
        channel=send.channel,
        chat_id=send.chat_id,
        content=scrub_surrogates(send.text),
        metadata={SESSION: str(session)},
        delivery_id=turn,
    )


def session_messages(send: OwnerSend) -> list[Message]:
    """What the chat's session gains once it is sent."""
    return [Message.assistant(scrub_surrogates(send.text))] if send.append else []


Cancelled = Literal["cancelled", "not_found", "too_late"]


class Sends(Protocol):
    """A profile's sends as `/v1/messages` uses them: one process's `Outbox`, or a cluster's
    (`gateway.cluster.sends.ClusterOutbox`)."""

    def knows_channel(self, name: str, /) -> bool:
        """Whether the profile has a channel of this name (a send to another is refused)."""
        ...

    async def take(self, request: SendRequest) -> tuple[OwnerSend, str]:
        """The send `request` asks for, durable, and its first answer's status."""
        ...

    async def find(self, send_id: str) -> OwnerSend | None: ...

    async def listed(self) -> list[OwnerSend]: ...

    async def cancel(self, send_id: str) -> Cancelled: ...


@dataclass(eq=False)
class Outbox:
    """A profile's sends: taken, scheduled, queued into their chats' lanes, and told apart
    by the delivery hook. `submit` queues a due send into its chat's lane."""

    profile: str
    journal: Journal
    submit: Callable[[OwnerSend], None]
    _: KW_ONLY
    #: Whether the profile has a channel of this name (a send to another is refused).
    knows_channel: Callable[[str], bool]
    clock: Clock
    #: (due, id) of the scheduled sends; a cancelled one is skipped when it comes up.
    _schedule: list[tuple[float, str]] = field(default_factory=list, init=False)
    _schedule_changed: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    #: In memory only: send id -> its record's way to the disk (a retry with its key
    #: answers only once the first request's record is durable).
    _durable: dict[str, asyncio.Future[None]] = field(default_factory=dict, init=False)

    async def take(self, request: SendRequest) -> tuple[OwnerSend, str]:
        """The send `request` asks for, durable, and its first answer's status (a retry with
        the same key gets the send it named, and the same status)."""
        if request.idempotency_key is not None:
            earlier = self.journal.state.send_keys.get(request.idempotency_key)
            if earlier is not None and (send := self.journal.state.sends.get(earlier)):
                await self._until_durable(send.id)
                return send, first_status(send)
        now = self.clock()
        due = None if request.send_at is None else request.send_at.timestamp()
        send = OwnerSend(
            id=f"msg_{new_turn_id().replace('-', '')}",
            channel=request.channel,
            chat_id=request.chat_id,
            text=request.text,
            at=now,
            due=due,
            key=request.idempotency_key,
            append=request.session == "append",
            status="scheduled" if due is not None and due > now else "queued",
        )
        self._durable[send.id] = self.journal.record_send(send)
        try:
            await self._until_durable(send.id)
        except LogWriteError:
            # Never durable, never answered 202: as if it was never asked for.
            self.journal.state.forget_send(send)
            raise
        log_taken(self.profile, send)
        self._place(send)
        return send, send.status

    async def _until_durable(self, send_id: str) -> None:
        written = self._durable.get(send_id)
        if written is None:
            return
        try:
            await asyncio.shield(written)
        finally:
            if written.done():
                self._durable.pop(send_id, None)

    def recover(self) -> None:
        """Schedule or queue what the previous run left unsent (the journal's open sends)."""
        for send in self.journal.state.open_sends():
            self._place(send, restarted=True)

    def _place(self, send: OwnerSend, *, restarted: bool = False) -> None:
        """Scheduled when its time is ahead, else queued into its chat's lane; late (its time
        passed while the daemon was down, or a busy loop kept it) is logged."""
        now = self.clock()
        if send.due is not None and send.due > now:
            heapq.heappush(self._schedule, (send.due, send.id))
            self._schedule_changed.set()
            return
        if send.due is not None and (now - send.due > LATE_AFTER_S or restarted):
            log.warning(
                "outbox.sent_late",
                profile=self.profile,
                id=send.id,
                lateness_s=round(now - send.due, 3),
            )
        if send.status == "scheduled":
            send.status = "queued"
            # Not awaited: the reply's outcome record, behind it, is.
            self.journal.record_standing(send)
        self.submit(send)

    async def run(self) -> None:
        """Queue each scheduled send when it is due; runs until cancelled."""
        while True:
            self._schedule_changed.clear()
            now = self.clock()
            while self._schedule and self._schedule[0][0] <= now:
                _due, send_id = heapq.heappop(self._schedule)
                send = self.journal.state.sends.get(send_id)
                if send is not None and send.status == "scheduled":
                    self._place(send)
            wait_s = self._schedule[0][0] - now if self._schedule else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._schedule_changed.wait(), wait_s)

    async def find(self, send_id: str) -> OwnerSend | None:
        return self.journal.state.sends.get(send_id)

    async def listed(self) -> list[OwnerSend]:
        return list(self.journal.state.sends.values())

    async def cancel(self, send_id: str) -> Cancelled:
        send = self.journal.state.sends.get(send_id)
        if send is None:
            return "not_found"
        if send.status == "cancelled":
            return "cancelled"
        if send.status not in OPEN_SEND_STATUSES or send.turn is not None:
            return "too_late"
        send.status, send.ended_at = "cancelled", self.clock()
        await self.journal.record_standing(send)
        log.info("outbox.cancelled", profile=self.profile, id=send.id)
        return "cancelled"

    def recorded(self, send: OwnerSend, turn: str) -> None:
        """`send`'s reply is about to be recorded as `turn` (not awaited: the outcome record
        written right behind it is)."""
        send.turn = turn
        self.journal.record_standing(send)

    def delivered(
        self, message: OutboundMessage, platform_ids: list[str], error: DeliveryError | None
    ) -> None:
        """The delivery hook's part: a send's reply delivered, or given up on."""
        send_id = self.journal.state.send_of_turn.get(message.delivery_id or "")
        send = None if send_id is None else self.journal.state.sends.get(send_id)
        if send is None:
            return
        if error is None:
            send.status, send.error = "sent", None
            send.platform_ids = [*send.platform_ids, *platform_ids]
        else:
            send.status, send.error = "failed", f"{error.reason}: {error}"
        send.ended_at = self.clock()
        self.journal.record_standing(send)
        log.info(
            "outbox.ended",
            profile=self.profile,
            id=send.id,
            status=send.status,
            platform_ids=send.platform_ids,
            error=send.error,
        )


def first_status(send: OwnerSend) -> str:
    """The status a send's first 202 said (what a retry with its key is answered)."""
    return "scheduled" if send.due is not None and send.due > send.at else "queued"


def log_taken(profile: str, send: OwnerSend) -> None:
    """The one line an owner's send is logged by once it is durable, in either mode."""
    log.info(
        "outbox.taken",
        profile=profile,
        id=send.id,
        channel=send.channel,
        chat_id=send.chat_id,
        status=send.status,
    )
