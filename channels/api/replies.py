"""Matching the gateway's replies to the HTTP requests that wait for them.

A request is known by its chat and the message id it sent (the client's `client_message_id`,
or one the server made up): `(chat_id, message_id)`. A client id means something only inside
its chat, so a reply is routed by both, never by the client id alone: chat "attacker" sending
chat "victim"'s client id waits for a reply of its own and never sees the victim's.

Several requests may wait for one key (a client retrying while its first request still waits):
every one of them gets every event. A final reply is kept for a while after it was delivered, so
a retry that arrives after the answer (the gateway recognises it as a duplicate and runs no
second turn) is answered with the same reply at once instead of waiting for one that never
comes.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import structlog

from bus import ANSWERS, FAILED, SESSION, USAGE, OutboundMessage

log = structlog.get_logger(__name__)

EventKind = Literal["snapshot", "done", "error"]
#: (chat_id, message_id): what a waiting request is known by.
RequestKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class ReplyEvent:
    kind: EventKind
    text: str
    session: str | None = None
    #: The turn's token counts (`bus.TokenUsage` as a dict), on a final event.
    usage: dict[str, int] | None = None
    #: The reply's files as the client sees them: kind, mime, name, size and a URL.
    attachments: tuple[dict[str, object], ...] = ()
    #: A final reply's buttons (rows of `{"text", "data"|"url"}`), and the id a tap on one
    #: names it by (`callback.message_id`).
    buttons: list[list[dict[str, str]]] = field(default_factory=list)
    message_id: str | None = None


@dataclass(eq=False)
class PendingReply:
    """One request's view of its reply: snapshots as they grow, then done or error."""

    key: RequestKey
    events: asyncio.Queue[ReplyEvent] = field(default_factory=asyncio.Queue)

    async def final(self, timeout_s: float) -> ReplyEvent | None:
        """The reply's done or error event, its snapshots passed over; None (logged) when none
        came within `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                event = await self.events.get()
                while event.kind == "snapshot":
                    event = await self.events.get()
        except TimeoutError:
            log.warning("api.reply_timeout", chat=self.key[0], timeout_s=timeout_s)
            return None
        return event


@dataclass(eq=False)
class RecentReplies:
    """Final replies by request key, for late retries, bounded in count, total size (in
    characters) and age."""

    capacity: int = 4096
    max_chars: int = 16_000_000
    ttl_s: float = 600.0
    clock: Callable[[], float] = time.monotonic
    _replies: OrderedDict[RequestKey, tuple[float, ReplyEvent]] = field(
        default_factory=OrderedDict, init=False, repr=False
    )
    _chars: int = field(default=0, init=False, repr=False)

    def put(self, key: RequestKey, event: ReplyEvent) -> None:
        self._drop(key)
        self._replies[key] = (self.clock(), event)
        self._chars += len(event.text)
        while self._replies and (
            len(self._replies) > self.capacity or self._chars > self.max_chars
        ):
            self._drop(next(iter(self._replies)))

    def _drop(self, key: RequestKey) -> None:
        entry = self._replies.pop(key, None)
        if entry is not None:
            self._chars -= len(entry[1].text)

    def get(self, key: RequestKey) -> ReplyEvent | None:
        entry = self._replies.get(key)
        if entry is None:
            return None
        stored_at, event = entry
        if self.clock() - stored_at > self.ttl_s:
            self._drop(key)
            return None
        return event


class ReplyRouter:
    """Routes outbound messages to waiting requests by chat and the message ids they answer.

    A streamed reply is one platform "message" the manager sends once and then edits; the
    router remembers which requests each such message belongs to.
    """

    def __init__(self) -> None:
        self._waiting: dict[RequestKey, list[PendingReply]] = {}
        self._streams: dict[str, tuple[list[RequestKey], str | None]] = {}
        self._recent = RecentReplies()
        self._ids = itertools.count(1)
        #: The token usage of streamed replies about to finish, by the streams' message ids.
        self._ending_usage: dict[str, dict[str, int]] = {}
        self._stream_ids: dict[RequestKey, str] = {}

    def wait_for(self, chat_id: str, message_id: str) -> PendingReply:
        """A new waiter; if the reply was already given, it is there at once."""
        key = (chat_id, message_id)
        pending = PendingReply(key)
        answered = self._recent.get(key)
        if answered is not None:
            pending.events.put_nowait(answered)
        self._waiting.setdefault(key, []).append(pending)
        return pending

    def forget(self, pending: PendingReply) -> None:
        waiters = self._waiting.get(pending.key)
        if waiters is None:
            return
        if pending in waiters:
            waiters.remove(pending)
        if not waiters:
            del self._waiting[pending.key]

    @staticmethod
    def _answered_keys(message: OutboundMessage) -> list[RequestKey]:
        answers = message.metadata.get(ANSWERS)
        ids = [str(item) for item in answers] if isinstance(answers, list) else []
        if message.reply_to is not None and message.reply_to not in ids:
            ids.append(message.reply_to)
        return [(message.chat_id, message_id) for message_id in ids]

    def _emit(self, keys: list[RequestKey], event: ReplyEvent) -> None:
        for key in keys:
            if event.kind != "snapshot":
                self._recent.put(key, event)
            for pending in self._waiting.get(key, ()):
                pending.events.put_nowait(event)

    def final(
        self, message: OutboundMessage, attachments: tuple[dict[str, object], ...] = ()
    ) -> None:
        kind: EventKind = "error" if message.metadata.get(FAILED) else "done"
        session = message.metadata.get(SESSION)
        buttons = [[button.to_dict() for button in row] for row in message.buttons]
        event = ReplyEvent(
            kind,
            message.content,
            str(session) if session else None,
            _usage_of(message),
            attachments,
            buttons=buttons,
            message_id=message.delivery_id if buttons else None,
        )
        keys = self._answered_keys(message)
        if message.stream_id is not None:
            # A whole reply ending a stream (one with buttons): nothing edits that stream now.
            for stream_message_id, (stream_keys, _session) in list(self._streams.items()):
                if set(stream_keys) & set(keys):
                    del self._streams[stream_message_id]
        self._emit(keys, event)

    def ending(self, message: OutboundMessage) -> None:
        """The final message of a streamed reply, before `finish` gets its text: its usage is
        kept for the done event."""
        usage = _usage_of(message)
        if usage is None:
            return
        for key in self._answered_keys(message):
            stream_message_id = self._stream_ids.get(key)
            if stream_message_id is not None:
                self._ending_usage[stream_message_id] = usage

    def open_stream(self, message: OutboundMessage) -> str:
        """A new platform message id for a streamed reply, remembered for its edits."""
        stream_message_id = f"s{next(self._ids)}"
        if message.stream_id is None:
            # Not part of a stream (an embed, say): a whole reply, nothing will edit it.
            self.final(message)
            return stream_message_id
        session = message.metadata.get(SESSION)
        keys = self._answered_keys(message)
        self._streams[stream_message_id] = (keys, str(session) if session else None)
        self._stream_ids.update((key, stream_message_id) for key in keys)
        self._emit(keys, ReplyEvent("snapshot", message.content))
        return stream_message_id

    def snapshot(self, stream_message_id: str, text: str) -> None:
        keys, _session = self._streams.get(stream_message_id, ([], None))
        self._emit(keys, ReplyEvent("snapshot", text))

    def finish(self, stream_message_id: str, text: str) -> None:
        keys, session = self._streams.pop(stream_message_id, ([], None))
        for key in keys:
            if self._stream_ids.get(key) == stream_message_id:
                del self._stream_ids[key]
        usage = self._ending_usage.pop(stream_message_id, None)
        self._emit(keys, ReplyEvent("done", text, session, usage))

    def fail_all(self, reason: str) -> None:
        """The channel is stopping: every waiting request gets an error event."""
        event = ReplyEvent("error", reason)
        for waiters in self._waiting.values():
            for pending in waiters:
                pending.events.put_nowait(event)
        self._streams.clear()
        self._stream_ids.clear()
        self._ending_usage.clear()


def _usage_of(message: OutboundMessage) -> dict[str, int] | None:
    usage = message.metadata.get(USAGE)
    return usage if isinstance(usage, dict) else None
