"""The function calls the event loop's thread makes over a stretch of work, as
`sys.setprofile` reports them: a count of the work done that does not move with the machine's
speed, where a time does (a coroutine's every resumption counts as a call, as it costs one).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any


@dataclass
class LoopCalls:
    python: int = 0
    builtin: int = 0

    def _observe(self, _frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            self.python += 1
        elif event == "c_call":
            self.builtin += 1


@contextmanager
def loop_calls() -> Iterator[LoopCalls]:
    """Every call this thread makes inside the block (other threads are not counted: the
    journal's writer thread, the session store's pool)."""
    calls = LoopCalls()
    previous = sys.getprofile()
    sys.setprofile(calls._observe)
    try:
        yield calls
    finally:
        sys.setprofile(previous)
