"""A bound on each platform call, without a timer per call.

`asyncio.timeout` around every send schedules a timer and cancels it again: a handle, a heap
push, and a cancelled handle left in the loop's heap for the whole timeout (60 s), which the
loop keeps sifting and rebuilds when half of it is dead. That was about 4% of a turn's
instructions (callgrind, `python -m bench gateway`), for a bound meant only for a channel whose
own timeouts are missing. Here the running calls are kept in a set with their deadlines, and one
check, scheduled only while calls run, cancels those past due: a call runs at most one tick
(`MAX_TICK_S`, or the bound itself when shorter) longer than its bound: nothing, for a safety
net of a minute.

A call cancelled here ends in `TimeoutError`, as under `asyncio.timeout`; a cancellation from
anywhere else (an abort, shutdown) is passed on untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

#: How often running calls are checked, at most (a shorter bound checks as often as it lasts).
MAX_TICK_S = 1.0


@dataclass(eq=False, slots=True)
class _Call:
    task: asyncio.Task[object]
    deadline: float
    #: The task's cancel count when the call began: more than that at its end is someone else's.
    cancels: int
    expired: bool = False


class AttemptDeadlines:
    """Runs awaitables with a bound each; one per event loop user (a `Retrier`). Calls may
    nest, in one task or many: each has its own deadline."""

    def __init__(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError(f"an attempt's timeout must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self._tick_s = min(MAX_TICK_S, timeout_s)
        self._running: set[_Call] = set()
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
        call = _Call(task, loop.time() + self.timeout_s, task.cancelling())
        self._running.add(call)
        if self._check is None or self._check_loop is not loop:  # (a test's loop may be gone)
            self._check = loop.call_later(self._tick_s, self._cancel_overdue)
            self._check_loop = loop
        try:
            return await operation()
        except asyncio.CancelledError:
            # Ours, unless someone else cancelled the task as well.
            if call.expired and task.uncancel() <= call.cancels:
                raise TimeoutError(f"the call took longer than {self.timeout_s:g} s") from None
            raise
        finally:
            self._running.discard(call)

    def _cancel_overdue(self) -> None:
        self._check = None
        if not self._running:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for call in self._running:
            if not call.expired and call.deadline <= now:
                call.expired = True
                call.task.cancel()
        self._check = loop.call_later(self._tick_s, self._cancel_overdue)
