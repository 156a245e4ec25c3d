"""A platform outage a test switches on in a fake: every call fails until the test ends it.

While an `Outage` is `down()`, the fake answers every request it gets with `status` (500 by
default) and a plain-text body, as a platform's failing load balancer does, without acting on
it, and records each refused request in `failed`. A test counts the attempts that carried a
reply (`failed_carrying`) to know its delivery was tried again, and ends the outage once that
many failed.

    async with fake.outage.down():
        ...
        await fake.outage.wait_failed(carrying="marker", more_than=5, timeout_s=90)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler

from tests.fakes.changes import Changes


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """A request the fake refused during an outage."""

    method: str
    path: str
    body: bytes
    #: When it came (the event loop's clock).
    at: float


class Outage:
    """The outage switch of one fake; its `middleware` goes on each of the fake's apps."""

    def __init__(self) -> None:
        self.failed: list[FailedAttempt] = []
        self._status: int | None = None
        self._changes = Changes()

    @property
    def active(self) -> bool:
        return self._status is not None

    @asynccontextmanager
    async def down(self, status: int = 500) -> AsyncIterator[None]:
        """Every request fails with `status` until the block is left."""
        self._status = status
        try:
            yield
        finally:
            self._status = None

    async def record_failed(self, method: str, path: str, body: bytes) -> None:
        """Count a call refused because of the outage (a fake that is not HTTP refuses its own
        way, an SMTP server with a 4xx, and records it here)."""
        self.failed.append(FailedAttempt(method, path, body, asyncio.get_running_loop().time()))
        await self._changes.notify()

    def failed_carrying(self, text: str) -> int:
        """How many refused calls carried `text` in their body."""
        needle = text.encode()
        return sum(1 for attempt in self.failed if needle in attempt.body)

    async def wait_failed(self, *, carrying: str, more_than: int, timeout_s: float) -> None:
        await self.wait_until(lambda: self.failed_carrying(carrying) > more_than, timeout_s)

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> None:
        """Until `condition()` holds, looked at again at each refused call."""
        await self._changes.wait_until(condition, timeout_s)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._status is None:
            return await handler(request)
        status = self._status
        await self.record_failed(request.method, request.path, await request.read())
        return web.Response(status=status, text="the platform is down, try again later")
