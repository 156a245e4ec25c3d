"""A bounded memory of recent keys: what a channel keeps per message or chat, never unbounded.

Channels remember things per platform message or chat (LINE reply tokens, WeCom bot callbacks,
QQ passive-reply counts, Slack threads, email threads, WhatsApp's latest message per chat,
Telegram webhook update ids). Each keeps at most `capacity` entries: setting a key makes it
the newest, and past the capacity the oldest are dropped. `remember` returns what it dropped,
for a caller that keeps something else under the same keys.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class RecentMap(OrderedDict[K, V]):
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        super().__init__()
        self.capacity = capacity

    def remember(self, key: K, value: V) -> list[tuple[K, V]]:
        """Set `key` as the newest entry; the entries dropped to stay within capacity."""
        self[key] = value
        self.move_to_end(key)
        dropped: list[tuple[K, V]] = []
        while len(self) > self.capacity:
            dropped.append(self.popitem(last=False))
        return dropped
