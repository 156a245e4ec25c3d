"""Racing work against a stop event: the one way a channel ends a wait when it is stopped.

`until_stopped` runs one awaitable as a named task beside a watcher of the event and returns
its result, or None once the event is set first (the work is then cancelled and collected).
`sleep_unless_set` is the same race for a pause, with the sleep injectable so tests run it
on a fake clock. Both collect every task they start before returning: no task outlives them,
and a cancellation of the caller still propagates after the children are collected.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]


async def until_stopped(
    work: Coroutine[Any, Any, T], stopping: asyncio.Event, *, name: str
) -> T | None:
    """The result of `work`, or None once `stopping` is set first (then `work` is cancelled).

    An exception `work` raises is raised here. A `work` that is already late (the event set
    before the call) is closed without being started.
    """
    if stopping.is_set():
        work.close()
        return None
    task = asyncio.create_task(work, name=name)
    watcher = asyncio.create_task(stopping.wait(), name=f"{name}:stop-watcher")
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watcher):
            pending.cancel()
        # Waiting (rather than awaiting each task) lets our own cancellation propagate
        # while the children's expected CancelledError stays theirs.
        await asyncio.wait({task, watcher})
    if task.cancelled():
        return None
    return task.result()


async def sleep_unless_set(
    event: asyncio.Event, delay_s: float, sleep: Sleep = asyncio.sleep
) -> bool:
    """Wait `delay_s` with `sleep`, or less if `event` is set first; True if it was set."""

    async def sleep_through() -> None:
        await sleep(delay_s)

    await until_stopped(sleep_through(), event, name="sleep")
    return event.is_set()
