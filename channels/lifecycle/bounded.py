"""A bounded memory of recent keys: what a channel keeps per message or chat, never unbounded.

Channels remember things per platform message or chat (LINE reply tokens, WeCom bot callbacks,
QQ passive-reply counts, Slack threads, email threads, WhatsApp's latest message per chat,
Telegram webhook update ids). Each keeps at most `capacity` entries: setting a key makes it
the newest, and past the capacity the oldest are dropped. `remember` returns what it dropped,
for a caller that keeps something else under the same keys.

What is only worth keeping for a while (inbound message ids for de-duplication, LINE reply
tokens, Feishu's partial payloads) is an `AgedMap`: a `RecentMap` whose entries also expire
`ttl_s` after they were put.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

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


class AgedMap(Generic[K, V]):
    """At most `capacity` entries, each kept `ttl_s` from when it was put; putting a key again
    makes it the newest and starts its age again. Entries are in the order they were put, so
    the expired ones are at the front and each is dropped once: every operation is O(1)
    amortised."""

    def __init__(
        self, capacity: int, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        self.ttl_s = ttl_s
        self._clock = clock
        #: key -> (when it was put, value).
        self._entries: RecentMap[K, tuple[float, V]] = RecentMap(capacity)

    def put(self, key: K, value: V) -> None:
        now = self._expire()
        self._entries.remember(key, (now, value))

    def get(self, key: K) -> V | None:
        """The value under `key`, unless it has expired."""
        self._expire()
        entry = self._entries.get(key)
        return entry[1] if entry is not None else None

    def pop(self, key: K) -> V | None:
        """Forget `key`; its value, unless it had expired."""
        self._expire()
        entry = self._entries.pop(key, None)
        return entry[1] if entry is not None else None

    def __contains__(self, key: object) -> bool:
        self._expire()
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _expire(self) -> float:
        now = self._clock()
        while self._entries:
            oldest_key, (put_at, _value) = next(iter(self._entries.items()))
            if now - put_at < self.ttl_s:
                break
            del self._entries[oldest_key]
        return now


# Inbound de-duplication: a reconnect or a platform's own retry must not be answered twice.
#
# Keys are platform message ids scoped by channel (`"telegram:8812"`). Bounded in both size and
# age: at most `max_entries` keys (the oldest is evicted first), each remembered for `ttl_s` from
# its first sighting. A duplicate does not extend its key's life: a platform retries within
# seconds, and a fixed lifetime keeps the oldest entry at the front, so every operation is O(1)
# amortised.
class InboundDedup:
    def __init__(
        self,
        max_entries: int = 10_000,
        ttl_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        #: key -> nothing: when it was first seen is what the map keeps.
        self._seen: AgedMap[str, None] = AgedMap(max_entries, ttl_s, clock)

    def seen(self, key: str) -> bool:
        """True if `key` was seen within the TTL; otherwise remember it and return False."""
        if key in self._seen:
            return True
        self._seen.put(key, None)
        return False

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, key: object) -> bool:
        return key in self._seen
