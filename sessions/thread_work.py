"""Blocking file work in a thread, seen through to its end even when its caller is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def to_completion(
    work: Callable[[], T], on_abandoned: Callable[[T], object] | None = None
) -> T:
    """Run blocking file work in a thread and see it finish, even if the caller is cancelled.

    A thread cannot be stopped halfway, and the caller's lock on the session must outlive the
    work, or the next operation would race it. The cancellation is re-raised once the work is
    done; `on_abandoned` receives a result nobody else will (a descriptor to keep track of).
    """
    task = asyncio.create_task(asyncio.to_thread(work), name="session-file-work")
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            try:
                await asyncio.wait([task])
            except asyncio.CancelledError:
                continue  # already leaving with a CancelledError: raised below
        if on_abandoned is not None and not task.cancelled() and task.exception() is None:
            on_abandoned(task.result())
        raise
