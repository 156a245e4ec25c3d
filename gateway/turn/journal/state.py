"""`JournalState`: the journal's records folded into what is still unfinished.

The same fold runs live (each record as it is appended) and on replay (each record read back),
so a restarted daemon knows exactly what the one before it knew: which accepted messages were
never answered, which answers were never delivered, which platform ids were already seen.
Any prefix of a log folds to a consistent state: a `done` without its `in` (cut by a checkpoint)
or a `sent` without its `done` changes nothing it cannot account for.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from bus import CALLBACK, OutboundMessage, turn_made_at
from gateway.turn.journal.records import (
    OPEN_SEND_STATUSES,
    ButtonOffer,
    Edit,
    OpenedPart,
    Outcome,
    OwnerSend,
    Received,
    Record,
    edit_from,
    encode_sent,
    encode_snapshot,
    offer_from,
    opened_from,
    outcome_from,
    owner_send_from,
    received_from,
)

#: How long a platform id is remembered, and how many at most (the oldest go first).
DEDUP_TTL_S = 24 * 3600.0
DEDUP_MAX_ENTRIES = 200_000
#: How long a send's idempotency key, and a finished send's status, are kept (from when it
#: was asked for, and from when it ended).
SEND_TTL_S = 24 * 3600.0
#: Replies kept to answer a client's retry of an already answered request (the HTTP API).
RECENT_REPLIES_MAX = 10_000
#: How much of a message's earlier text an edit made after its turn quotes.
EARLIER_TEXT_CHARS = 100


@dataclass(slots=True)
class JournalState:
    next_id: int = 1
    #: Accepted and not yet answered, in arrival order.
    received: dict[int, Received] = field(default_factory=dict)
    #: Answered, and not yet both delivered and synced to the session file.
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    #: platform key -> (journal id, when it arrived)
    dedup: OrderedDict[str, tuple[int, float]] = field(default_factory=OrderedDict)
    #: journal id -> the reply that answered it, for the most recent answers on channels
    #: whose messages are requests (a client that retries an answered request gets this reply
    #: again, not a second turn)
    recent: OrderedDict[int, OutboundMessage] = field(default_factory=OrderedDict)
    #: Channels whose replies `recent` keeps.
    keeps_replies: frozenset[str] = frozenset()
    #: Dedup entries accepted since the last checkpoint (not yet in the dedup file).
    fresh_dedup: list[tuple[str, int, float]] = field(default_factory=list)
    #: How many accepted, unanswered messages each chat (channel, chat id) has.
    pending_by_chat: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Outcomes seen on replay whose messages may be missing from their session file.
    fixups: list[Outcome] = field(default_factory=list)
    #: turn -> the platform messages its streamed reply opened, by part; kept until the
    #: turn's reply is delivered, so a resumed turn finishes them in place.
    streams: dict[str, dict[int, OpenedPart]] = field(default_factory=dict)
    #: In memory only: inbound journal id -> the turn running for it, or whose stream opened
    #: messages for it (a resumed turn takes that turn's id again).
    turn_of_inbound: dict[int, str] = field(default_factory=dict)
    #: The owner's sends (`POST /v1/messages`), live or answerable, by id.
    sends: dict[str, OwnerSend] = field(default_factory=dict)
    #: idempotency key -> the send it named.
    send_keys: dict[str, str] = field(default_factory=dict)
    #: turn id -> the send whose reply that turn recorded.
    send_of_turn: dict[str, str] = field(default_factory=dict)
    #: (channel, chat) -> the buttons of the chat's last reply, when it had some: where they
    #: are shown as a numbered list, a reply of the number is their tap.
    offers: dict[tuple[str, str], ButtonOffer] = field(default_factory=dict)
    #: In memory only: journal id -> the start of the text of a recently answered message,
    #: which an edit made after its turn quotes.
    answered_texts: OrderedDict[int, str] = field(default_factory=OrderedDict)
    #: How long a reply's buttons can be tapped (the profile's `buttons_ttl_s`).
    buttons_ttl_s: float = DEDUP_TTL_S

    # The fold

    def apply(self, record: Record, *, replaying: bool) -> None:
        kind = record["k"]
        if kind == "in":
            self.add_received(received_from(record))
        elif kind == "done":
            outcome = outcome_from(record)
            self.add_outcome(outcome)
            if replaying:
                self.fixups.append(outcome)
        elif kind == "sent":
            self.mark_delivered(str(record["turn"]))
        elif kind == "opened":
            self.add_opened(opened_from(record))
        elif kind == "send":
            self.add_send(owner_send_from(record))
        elif kind == "sendst":
            send = self.sends.get(str(record["id"]))
            if send is not None:
                send.take_standing(record)
                self._index_send(send)
        elif kind == "edit":
            self.apply_edit(edit_from(record))
        elif kind == "del":
            self.drop_received(int(record["id"]))
        elif kind == "offer":
            offer = offer_from(record)
            self.offers[(offer.channel, offer.chat_id)] = offer
        elif kind == "snap":
            self.next_id = max(self.next_id, int(record["next"]))

    def add_received(self, received: Received) -> None:
        message = received.message
        self.received[received.id] = received
        self.pending_by_chat[message.channel, message.chat_id] += 1
        self.next_id = max(self.next_id, received.id + 1)
        # Only a tap (`CALLBACK`) has a tap key besides its platform id.
        keys = (
            (dedup_key(received), tap_key_of(received))
            if CALLBACK in message.metadata
            else (dedup_key(received),)
        )
        for key in keys:
            if key is not None:
                self.remember(key, received.id, received.at)
                self.fresh_dedup.append((key, received.id, received.at))

    def drop_received(self, inbound_id: int) -> None:
        received = self.received.pop(inbound_id, None)
        if received is not None:
            chat = (received.message.channel, received.message.chat_id)
            self.pending_by_chat[chat] -= 1
            if self.pending_by_chat[chat] <= 0:
                del self.pending_by_chat[chat]
            self.answered_texts[inbound_id] = received.message.content[:EARLIER_TEXT_CHARS]
            while len(self.answered_texts) > RECENT_REPLIES_MAX:
                self.answered_texts.popitem(last=False)

    def apply_edit(self, edit: Edit) -> None:
        received = self.received.get(edit.inbound_id)
        if received is not None:
            received.replace(edit.message)
        if edit.key is not None:
            self.remember(edit.key, edit.inbound_id, edit.at)
            self.fresh_dedup.append((edit.key, edit.inbound_id, edit.at))

    def waiting(self, inbound_id: int) -> Received | None:
        """The accepted message `inbound_id` if its turn has not started (an edit may still
        replace it, a delete drop it), else None."""
        if inbound_id in self.turn_of_inbound:
            return None
        return self.received.get(inbound_id)

    def earlier_text(self, inbound_id: int) -> str | None:
        """The start of the text of the accepted message `inbound_id`, while it is known (in
        memory: an edit made after its turn quotes it)."""
        received = self.received.get(inbound_id)
        if received is not None:
            return received.message.content[:EARLIER_TEXT_CHARS]
        return self.answered_texts.get(inbound_id)

    def remember(self, key: str, inbound_id: int, at: float) -> None:
        self.dedup[key] = (inbound_id, at)
        self.dedup.move_to_end(key)
        while len(self.dedup) > DEDUP_MAX_ENTRIES:
            self.dedup.popitem(last=False)

    def add_outcome(self, outcome: Outcome) -> None:
        keep = outcome.reply is not None and outcome.reply.channel in self.keeps_replies
        for inbound_id in outcome.answers:
            self.drop_received(inbound_id)
            if keep and outcome.reply is not None:
                self.recent[inbound_id] = outcome.reply
        while len(self.recent) > RECENT_REPLIES_MAX:
            self.recent.popitem(last=False)
        reply = outcome.reply
        if reply is None:
            outcome.delivered = True
        elif reply.buttons or (reply.channel, reply.chat_id) in self.offers:
            self._offer(outcome.turn, reply)
        self.outcomes[outcome.turn] = outcome
        for inbound_id in outcome.answers:
            turn = self.turn_of_inbound.pop(inbound_id, None)
            if turn is not None and turn != outcome.turn:
                # Answered by another turn (an abort, an interrupt): nothing will finish
                # what that turn's stream opened.
                self.streams.pop(turn, None)
        if outcome.delivered:
            self.streams.pop(outcome.turn, None)

    def add_send(self, send: OwnerSend) -> None:
        self.sends[send.id] = send
        if send.key is not None:
            self.send_keys[send.key] = send.id
        self._index_send(send)

    def _index_send(self, send: OwnerSend) -> None:
        if send.turn is not None:
            self.send_of_turn[send.turn] = send.id

    def _offer(self, turn: str, reply: OutboundMessage) -> None:
        """The chat's last reply: its buttons are the ones a number answers, or none are."""
        chat = (reply.channel, reply.chat_id)
        if not reply.buttons:
            self.offers.pop(chat, None)
            return
        at = turn_made_at(turn)
        self.offers[chat] = ButtonOffer(
            reply.channel, reply.chat_id, turn, reply.buttons, 0.0 if at is None else at
        )

    def start_turn(self, turn: str, answers: list[int]) -> None:
        for inbound_id in answers:
            self.turn_of_inbound[inbound_id] = turn

    def add_opened(self, opened: OpenedPart) -> None:
        self.streams.setdefault(opened.turn, {})[opened.part] = opened
        for inbound_id in opened.answers:
            if inbound_id in self.received:
                self.turn_of_inbound[inbound_id] = opened.turn

    def mark_delivered(self, turn: str) -> None:
        self.streams.pop(turn, None)
        outcome = self.outcomes.get(turn)
        if outcome is not None:
            outcome.delivered = True
            self._retire(outcome)

    def mark_written(self, turn: str) -> None:
        outcome = self.outcomes.get(turn)
        if outcome is not None:
            outcome.written = True
            self._retire(outcome)

    def mark_synced(self, turns: list[str]) -> None:
        for turn in turns:
            outcome = self.outcomes.get(turn)
            if outcome is not None:
                outcome.synced = True
                self._retire(outcome)

    def _retire(self, outcome: Outcome) -> None:
        if outcome.delivered and outcome.synced:
            del self.outcomes[outcome.turn]
        elif outcome.delivered and outcome.written:
            outcome.settle()

    # Questions

    def seen(self, key: str) -> int | None:
        """The journal id of an already accepted message with this platform key."""
        entry = self.dedup.get(key)
        return None if entry is None else entry[0]

    def tapped(self, channel: str, chat_id: str, message_id: str) -> bool:
        """Whether a button of the bot's message `message_id` was tapped already."""
        return tap_key(channel, chat_id, message_id) in self.dedup

    def reply_for(self, inbound_id: int) -> OutboundMessage | None:
        return self.recent.get(inbound_id)

    def answers_of(self, turn: str) -> tuple[int, ...]:
        """The inbound ids `turn` answers, as far as they are known."""
        outcome = self.outcomes.get(turn)
        if outcome is not None:
            return tuple(outcome.answers)
        return tuple(i for i, running in self.turn_of_inbound.items() if running == turn)

    def streamed_turn(self, answers: list[int]) -> str | None:
        """The turn whose stream opened messages answering one of `answers`, if one did: the
        turn that runs for them again takes its id, and so its messages."""
        for inbound_id in answers:
            turn = self.turn_of_inbound.get(inbound_id)
            if turn is not None and turn in self.streams:
                return turn
        return None

    def opened_parts(self, turn: str, channel: str, chat_id: str) -> dict[int, str]:
        """part -> platform id of the messages `turn`'s stream opened in that chat."""
        return {
            part: opened.platform_id
            for part, opened in self.streams.get(turn, {}).items()
            if opened.channel == channel and opened.chat_id == chat_id
        }

    def undelivered(self) -> list[Outcome]:
        return [o for o in self.outcomes.values() if not o.delivered and o.reply is not None]

    # Checkpoints

    def open_sends(self) -> list[OwnerSend]:
        """Sends not yet recorded as a reply (nor cancelled), oldest first."""
        return [
            send
            for send in self.sends.values()
            if send.status in OPEN_SEND_STATUSES and send.turn is None
        ]

    def expire(self, now: float) -> None:
        for send in list(self.sends.values()):
            if (
                send.ended_at is not None
                and now - send.ended_at >= SEND_TTL_S
                and now - send.at >= SEND_TTL_S
            ):
                self.forget_send(send)
        while self.dedup:
            key, (_inbound_id, at) = next(iter(self.dedup.items()))
            if now - at < DEDUP_TTL_S:
                break
            del self.dedup[key]
        for chat, offer in list(self.offers.items()):
            if now - offer.at >= self.buttons_ttl_s:
                del self.offers[chat]

    def forget_send(self, send: OwnerSend) -> None:
        del self.sends[send.id]
        if send.key is not None and self.send_keys.get(send.key) == send.id:
            del self.send_keys[send.key]
        if send.turn is not None:
            self.send_of_turn.pop(send.turn, None)

    def live_dedup(self) -> list[tuple[str, int, float]]:
        return [(key, inbound_id, at) for key, (inbound_id, at) in self.dedup.items()]

    def snapshot(self) -> list[bytes]:
        """Records that restate this state but for the dedup table (kept in its own file)."""
        records = [encode_snapshot(self.next_id)]
        records.extend(received.encode() for received in self.received.values())
        for outcome in self.outcomes.values():
            records.append(outcome.encode())
            if outcome.delivered and outcome.replied:
                records.append(encode_sent(outcome.turn))
        for parts in self.streams.values():
            records.extend(opened.encode() for opened in parts.values())
        records.extend(send.encode() for send in self.sends.values())
        records.extend(offer.encode() for offer in self.offers.values())
        return records


def platform_key(channel: str, chat_id: str, message_id: str) -> str:
    return f"{channel}\x1f{chat_id}\x1f{message_id}"


def tap_key(channel: str, chat_id: str, message_id: str) -> str:
    """The dedup table's entry for "a button of this bot message was tapped": kept with the
    platform ids (and so across restarts), under an id no platform's message has."""
    return platform_key(channel, chat_id, f"\x1etapped\x1e{message_id}")


def tap_key_of(received: Received) -> str | None:
    message = received.message
    callback = message.metadata.get(CALLBACK)
    if not isinstance(callback, dict) or not callback.get("message_id"):
        return None
    return tap_key(message.channel, message.chat_id, str(callback["message_id"]))


def dedup_key(received: Received) -> str | None:
    message = received.message
    if message.message_id is None:
        return None
    return platform_key(message.channel, message.chat_id, message.message_id)
