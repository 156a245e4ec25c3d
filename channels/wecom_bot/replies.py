"""Which callback a reply answers, and whether its `req_id` can still carry it.

A reply to a user's message goes out as `aibot_respond_msg` frames with that message's
`req_id`: one streamed message per callback, within the platform's reply window. Everything
else the bot says (a second message of a long reply, a reply whose window has passed, a reply
after a restart, when the `req_id` is no longer known) is sent of the bot's own accord with
`aibot_send_msg`. Concurrent turns each answer their own callback, so nothing is shared per
chat (octos kept one `req_id` per chat and mis-routed concurrent replies).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from channels.lifecycle.bounded import RecentMap

#: How long a callback's `req_id` takes replies. WeCom ends a stream the bot has not finished
#: six minutes after the user's message; five leaves room for the last frames.
REPLY_WINDOW_S = 300.0


@dataclass(slots=True)
class PendingCallback:
    req_id: str
    chat_id: str
    received_at: float
    #: A streamed message has been started on this `req_id`; it carries no second one.
    used: bool = False


@dataclass(frozen=True, slots=True)
class OpenStream:
    req_id: str
    chat_id: str


class ReplyBook:
    """Callbacks awaiting their reply and streams being shown, bounded in size and age."""

    # A RecentMap, not an AgedMap of expiring entries: `available` checks the window itself,
    # since a callback past its window must stop the search, which an expired entry could not.
    def __init__(
        self,
        *,
        window_s: float = REPLY_WINDOW_S,
        capacity: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window_s = window_s
        self._clock = clock
        self._callbacks: RecentMap[str, PendingCallback] = RecentMap(capacity)
        self._streams: RecentMap[str, OpenStream] = RecentMap(capacity)

    def received(self, msg_id: str, req_id: str, chat_id: str) -> None:
        self._callbacks.remember(msg_id, PendingCallback(req_id, chat_id, self._clock()))

    def available(self, msg_ids: Iterable[str], chat_id: str) -> tuple[str, str] | None:
        """(msg_id, req_id) of the callback a new streamed message may answer, if any.

        Marked used only by `use`, once its first frame was acknowledged: a frame the retry
        layer sends again (after a rate limit) still finds the callback free."""
        now = self._clock()
        for msg_id in msg_ids:
            pending = self._callbacks.get(msg_id)
            if pending is None or pending.chat_id != chat_id:
                continue
            if pending.used or now - pending.received_at > self._window_s:
                return None
            return msg_id, pending.req_id
        return None

    def use(self, msg_id: str) -> None:
        pending = self._callbacks.get(msg_id)
        if pending is not None:
            pending.used = True

    def open_stream(self, stream_id: str, req_id: str, chat_id: str) -> None:
        self._streams.remember(stream_id, OpenStream(req_id, chat_id))

    def stream(self, stream_id: str) -> OpenStream | None:
        return self._streams.get(stream_id)

    def close_stream(self, stream_id: str) -> None:
        self._streams.pop(stream_id, None)
