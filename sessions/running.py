"""`RunningOperations`: how many of a store's operations run, so its `close` can wait for them."""

from __future__ import annotations

import asyncio


class RunningOperations:
    """`with operations:` around each operation; `await operations.idle()` returns once none
    runs. Entering and leaving never suspend."""

    __slots__ = ("_count", "_idle")

    def __init__(self) -> None:
        self._count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def __enter__(self) -> None:
        self._count += 1
        self._idle.clear()

    def __exit__(self, *exc_info: object) -> None:
        self._count -= 1
        if self._count == 0:
            self._idle.set()

    async def idle(self) -> None:
        await self._idle.wait()
