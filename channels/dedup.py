"""Inbound de-duplication: a reconnect or a platform's own retry must not be answered twice.

Keys are platform message ids scoped by channel (`"telegram:8812"`). Bounded in both size and
age: at most `max_entries` keys (the oldest is evicted first), each remembered for `ttl_s` from
its first sighting. A duplicate does not extend its key's life: a platform retries within
seconds, and a fixed lifetime keeps the oldest entry at the front, so every operation is O(1)
amortised.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class InboundDedup:
    def __init__(
        self,
        max_entries: int = 10_000,
        ttl_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        # key -> when it was first seen; oldest first, so expiry only ever looks at the front.
        self._seen_at: OrderedDict[str, float] = OrderedDict()

    def seen(self, key: str) -> bool:
        """True if `key` was seen within the TTL; otherwise remember it and return False."""
        now = self._clock()
        self._expire(now)
        if key in self._seen_at:
            return True
        self._seen_at[key] = now
        if len(self._seen_at) > self.max_entries:
            self._seen_at.popitem(last=False)
        return False

    def __len__(self) -> int:
        return len(self._seen_at)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        seen_at = self._seen_at.get(key)
        return seen_at is not None and self._clock() - seen_at < self.ttl_s

    def _expire(self, now: float) -> None:
        # Entries are kept in insertion order and never refreshed, so the front is the oldest:
        # each expired entry is popped once, which keeps `seen` O(1) amortised.
        while self._seen_at:
            oldest_key, seen_at = next(iter(self._seen_at.items()))
            if now - seen_at < self.ttl_s:
                break
            del self._seen_at[oldest_key]
