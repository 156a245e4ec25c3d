"""Passive replies: QQ answers only within a window after the user's message, five at most.

Since 2025-04 a QQ bot can only reply (`msg_id` of the user's message, plus `msg_seq`, unique
per `msg_id`): within 60 minutes in a C2C chat, 5 minutes in a group, and at most 5 replies per
message. `msg_seq` is counted per `msg_id` (octos used one global counter, and the same pair
twice is refused). Where the reply carries a `delivery_id` (`<turn>.<part>`), the part number
picks the sequence, so a resend after a crash repeats its pair and QQ reports it as known
instead of showing it twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from channels.lifecycle.bounded import RecentMap
from channels.qq.api import ReplyWindowClosed
from channels.qq.token import CHANNEL

ChatKind = Literal["c2c", "group"]
MAX_REPLIES = 5
WINDOW_S: dict[ChatKind, float] = {"c2c": 3600.0, "group": 300.0}


@dataclass(slots=True)
class _Received:
    kind: ChatKind
    received_at: float
    used: set[int] = field(default_factory=set)


class PassiveReplies:
    def __init__(
        self, *, capacity: int = 20_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self._messages: RecentMap[str, _Received] = RecentMap(capacity)

    def received(self, msg_id: str, kind: ChatKind) -> None:
        if msg_id in self._messages:
            return
        self._messages.remember(msg_id, _Received(kind, self._clock()))

    def next_seq(self, msg_id: str, kind: ChatKind, delivery_id: str | None) -> int:
        """The `msg_seq` of the next reply to `msg_id`; ReplyWindowClosed when none is left."""
        record = self._messages.get(msg_id)
        if record is None:
            # Received before a restart: its age is unknown, QQ will say if it is too old.
            record = _Received(kind, self._clock())
            self._messages[msg_id] = record
        if self._clock() - record.received_at > WINDOW_S[record.kind]:
            raise ReplyWindowClosed(
                f"message {msg_id} is older than QQ's reply window "
                f"({WINDOW_S[record.kind] / 60:g} min)",
                channel=CHANNEL,
            )
        # A delivery id fixes the sequence, so a retry of the same part repeats its pair.
        seq = _part_seq(delivery_id)
        if seq is None:
            free = [n for n in range(1, MAX_REPLIES + 1) if n not in record.used]
            seq = free[0] if free else None
        if seq is None or seq > MAX_REPLIES:
            raise ReplyWindowClosed(
                f"message {msg_id} already has QQ's {MAX_REPLIES} replies", channel=CHANNEL
            )
        record.used.add(seq)
        return seq


def _part_seq(delivery_id: str | None) -> int | None:
    if not delivery_id:
        return None
    _, dot, part = delivery_id.rpartition(".")
    if not dot or not part.isdigit():
        return None
    return int(part) + 1
