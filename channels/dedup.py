"""Inbound de-duplication: a reconnect or a platform's own retry must not be answered twice.

Keys are platform message ids scoped by channel (`"telegram:8812"`). Bounded in both size and
age: at most `max_entries` keys (the oldest is evicted first), each remembered for `ttl_s` from
its first sighting. A duplicate does not extend its key's life: a platform retries within
seconds, and a fixed lifetime keeps the oldest entry at the front, so every operation is O(1)
amortised.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from channels.bounded import AgedMap


class InboundDedup:
    # The bounds of an AgedMap, as Feishu's Reassembler takes them too, named for what is kept.
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
