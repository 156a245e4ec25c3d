"""The garbage collector's pauses over a stretch of work, as `gc.callbacks` report them."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class CollectorPauses:
    collections: int = 0
    total_s: float = 0.0
    longest_s: float = 0.0
    _started: float = 0.0

    def _observe(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        self.collections += 1
        self.total_s += pause
        self.longest_s = max(self.longest_s, pause)


@contextmanager
def collector_pauses() -> Iterator[CollectorPauses]:
    """Every collection (of any generation) that runs inside the block, counted and timed."""
    pauses = CollectorPauses()
    gc.callbacks.append(pauses._observe)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(pauses._observe)
