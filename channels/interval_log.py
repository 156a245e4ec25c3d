"""A log event that may happen thousands of times a second, logged at most once per interval.

The first occurrence is logged at once; later ones are counted and the count is logged with the
next occurrence after the interval has passed, so a flood costs one line per interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class _Logger(Protocol):
    def warning(self, event: str, **fields: object) -> object: ...


class IntervalLog:
    def __init__(
        self,
        event: str,
        interval_s: float,
        logger: _Logger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._event = event
        self._interval_s = interval_s
        self._logger = logger
        self._clock = clock
        self._last_logged: float | None = None
        self._unlogged = 0
        self.total = 0

    def note(self, **fields: object) -> None:
        """One more occurrence; logged (with the count since the last line) when due."""
        self.total += 1
        self._unlogged += 1
        now = self._clock()
        if self._last_logged is not None and now - self._last_logged < self._interval_s:
            return
        self._logger.warning(
            self._event, count=self._unlogged, interval_s=self._interval_s, **fields
        )
        self._last_logged = now
        self._unlogged = 0
