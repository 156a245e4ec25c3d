"""What a fake's tests wait on: a condition checked again after every change the fake sees."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Changes:
    """A fake calls `await changes.notify()` after each change to what it recorded; a test's
    `await changes.wait_until(predicate, timeout_s)` returns once `predicate()` is true."""

    def __init__(self) -> None:
        self._condition = asyncio.Condition()

    async def notify(self) -> None:
        async with self._condition:
            self._condition.notify_all()

    async def wait_until(self, predicate: Callable[[], object], timeout_s: float) -> None:
        async with asyncio.timeout(timeout_s), self._condition:
            await self._condition.wait_for(lambda: bool(predicate()))
