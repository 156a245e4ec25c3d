"""A log event that may happen thousands of times a second, logged at most once per interval.

The first occurrence is logged at once; later ones are counted and the count is logged with the
next occurrence after the interval has passed, so a flood costs one line per interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class _Logger(Protocol):
    def warning(self, event: str, **fields: object) -> object: ...


@dataclass(eq=False)
class IntervalLog:
    event: str
    interval_s: float
    logger: _Logger
    clock: Callable[[], float] = time.monotonic
    #: Occurrences since this was made, logged or not.
    total: int = field(default=0, init=False)
    _last_logged: float | None = field(default=None, init=False, repr=False)
    _unlogged: int = field(default=0, init=False, repr=False)

    def note(self, **fields: object) -> None:
        """One more occurrence; logged (with the count since the last line) when due."""
        self.total += 1
        self._unlogged += 1
        now = self.clock()
        if self._last_logged is not None and now - self._last_logged < self.interval_s:
            return
        self.logger.warning(self.event, count=self._unlogged, interval_s=self.interval_s, **fields)
        self._last_logged = now
        self._unlogged = 0
