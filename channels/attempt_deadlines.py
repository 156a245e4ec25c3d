"""A bound on each platform call, without a timer per call.

`asyncio.timeout` around every send schedules a timer and cancels it again: a handle, a heap
push, and a cancelled handle left in the loop's heap for the whole timeout (60 s), which the
loop keeps sifting and rebuilds when half of it is dead. That was about 4% of a turn's
instructions (callgrind, `python -m bench gateway`), for a bound meant only for a channel whose
own timeouts are missing. Here the running calls are kept in a dict with their deadlines, and one
check, scheduled only while calls run, cancels those past due: a call runs at most `tick_s`
longer than its bound, which for a safety net of a minute is nothing.

A call cancelled here ends in `TimeoutError`, as under `asyncio.timeout`; a cancellation from
anywhere else (an abort, shutdown) is passed on untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: How often running calls are checked, at most (a shorter bound checks as often as it lasts).
MAX_TICK_S = 1.0


class AttemptDeadlines:
    """Runs awaitables with a bound each; one per event loop user (a `Retrier`)."""

    def __init__(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError(f"an attempt's timeout must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self._tick_s = min(MAX_TICK_S, timeout_s)
        #: task -> (deadline on the loop's clock, the task's cancel count when it began)
        self._running: dict[asyncio.Task[object], tuple[float, int]] = {}
        #: Tasks this class cancelled whose call has not ended yet.
        self._expired: set[asyncio.Task[object]] = set()
        self._check: asyncio.TimerHandle | None = None
        self._check_loop: asyncio.AbstractEventLoop | None = None

    @property
    def running(self) -> int:
        return len(self._running)

    async def call(self, operation: Callable[[], Awaitable[T]]) -> T:
        """`operation()`'s result; `TimeoutError` once it has run `timeout_s` (give or take
        one tick)."""
        task = asyncio.current_task()
        assert task is not None, "AttemptDeadlines.call runs in a task"
        loop = asyncio.get_running_loop()
        self._running[task] = (loop.time() + self.timeout_s, task.cancelling())
        if self._check is None or self._check_loop is not loop:  # (a test's loop may be gone)
            self._check = loop.call_later(self._tick_s, self._cancel_overdue)
            self._check_loop = loop
        try:
            return await operation()
        except asyncio.CancelledError:
            if task in self._expired:
                self._expired.discard(task)
                # Ours, unless someone else cancelled the task as well.
                if task.uncancel() <= self._running_cancels(task):
                    raise TimeoutError(f"the call took longer than {self.timeout_s:g} s") from None
            raise
        finally:
            self._running.pop(task, None)
            self._expired.discard(task)

    def _running_cancels(self, task: asyncio.Task[object]) -> int:
        entry = self._running.get(task)
        return entry[1] if entry is not None else 0

    def _cancel_overdue(self) -> None:
        self._check = None
        if not self._running:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for task, (deadline, _cancels) in self._running.items():
            if deadline <= now and task not in self._expired:
                self._expired.add(task)
                task.cancel()
        self._check = loop.call_later(self._tick_s, self._cancel_overdue)
