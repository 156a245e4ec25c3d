"""An event loop on virtual time, for tests of code that waits on the loop's own clock
(`aiolimiter`'s buckets, `asyncio.sleep`, `asyncio.timeout`) without really waiting.

Whenever no callback is ready to run, the clock jumps to the next timer, so a wait of an hour
takes no time and every wake-up happens at its time. A timer already due when the loop is idle
moves the clock on by a microsecond: code that reschedules itself "now" until time has passed
(aiolimiter does, after a rounding error) would otherwise spin at one instant for ever.

    result = run_virtual(main())
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_TICK_S = 1e-6


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 0.0

    def time(self) -> float:
        return self._virtual_now

    def _run_once(self) -> None:
        # The base loop keeps what is due in `_ready` and its timers in the heap `_scheduled`.
        ready: Any = getattr(self, "_ready")  # noqa: B009 - the base loop's private queue
        scheduled: Any = getattr(self, "_scheduled")  # noqa: B009
        if not ready:
            due = [handle.when() for handle in scheduled if not handle.cancelled()]
            if due:
                self._virtual_now = max(self._virtual_now + _TICK_S, min(due))
        super()._run_once()  # type: ignore[misc]


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to its end on a fresh virtual-time loop."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)
