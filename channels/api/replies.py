"""Matching the gateway's replies to the HTTP requests that wait for them."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Literal

from bus import ANSWERS, FAILED, SESSION, OutboundMessage

EventKind = Literal["snapshot", "done", "error"]


@dataclass(frozen=True, slots=True)
class ReplyEvent:
    kind: EventKind
    text: str
    session: str | None = None


@dataclass(eq=False)
class PendingReply:
    """One request's view of its reply: snapshots as they grow, then done or error."""

    events: asyncio.Queue[ReplyEvent] = field(default_factory=asyncio.Queue)


class ReplyRouter:
    """Routes outbound messages to waiting requests by the platform message ids they answer.

    A streamed reply is one platform "message" the manager sends once and then edits; the
    router remembers which requests each such message belongs to.
    """

    def __init__(self) -> None:
        self._waiting: dict[str, PendingReply] = {}
        self._streams: dict[str, tuple[list[str], str | None]] = {}
        self._ids = itertools.count(1)

    def wait_for(self, message_id: str) -> PendingReply:
        pending = PendingReply()
        self._waiting[message_id] = pending
        return pending

    def forget(self, message_id: str) -> None:
        self._waiting.pop(message_id, None)

    @staticmethod
    def _answered_ids(message: OutboundMessage) -> list[str]:
        answers = message.metadata.get(ANSWERS)
        ids = [str(item) for item in answers] if isinstance(answers, list) else []
        if message.reply_to is not None and message.reply_to not in ids:
            ids.append(message.reply_to)
        return ids

    def _emit(self, request_ids: list[str], event: ReplyEvent) -> None:
        for request_id in request_ids:
            pending = self._waiting.get(request_id)
            if pending is not None:
                pending.events.put_nowait(event)
            if event.kind != "snapshot":
                self._waiting.pop(request_id, None)

    def final(self, message: OutboundMessage) -> None:
        kind: EventKind = "error" if message.metadata.get(FAILED) else "done"
        session = message.metadata.get(SESSION)
        event = ReplyEvent(kind, message.content, str(session) if session else None)
        self._emit(self._answered_ids(message), event)

    def open_stream(self, message: OutboundMessage) -> str:
        """A new platform message id for a streamed reply, remembered for its edits."""
        stream_message_id = f"s{next(self._ids)}"
        if message.stream_final:
            self.final(message)
            return stream_message_id
        session = message.metadata.get(SESSION)
        request_ids = self._answered_ids(message)
        self._streams[stream_message_id] = (request_ids, str(session) if session else None)
        self._emit(request_ids, ReplyEvent("snapshot", message.content))
        return stream_message_id

    def snapshot(self, stream_message_id: str, text: str) -> None:
        request_ids, _session = self._streams.get(stream_message_id, ([], None))
        self._emit(request_ids, ReplyEvent("snapshot", text))

    def finish(self, stream_message_id: str, text: str) -> None:
        request_ids, session = self._streams.pop(stream_message_id, ([], None))
        self._emit(request_ids, ReplyEvent("done", text, session))

    def fail_all(self, reason: str) -> None:
        """The channel is stopping: every waiting request gets an error event."""
        for request_id in list(self._waiting):
            self._emit([request_id], ReplyEvent("error", reason))
