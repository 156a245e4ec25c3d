"""An `InboundSender` a test controls: it records, can hold a message undurable, or refuse.

A channel must acknowledge its platform only once `send` has returned; holding `send` open
shows that the platform is not answered before, and `refuse_next` that a full backlog is passed
back to the platform as "try again later".
"""

from __future__ import annotations

import asyncio

from bus import InboundMessage, InboundRefused


class GatedInbound:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()
        self.closed = False
        self._refusals = 0
        self._arrived = asyncio.Event()

    def hold(self) -> None:
        """The next sends wait (not yet durable) until `release` is set."""
        self.release.clear()

    def refuse_next(self, count: int = 1) -> None:
        self._refusals += count

    async def send(self, message: InboundMessage) -> None:
        if self._refusals:
            self._refusals -= 1
            raise InboundRefused("global", 2.0, "backlog full")
        self.holding.set()
        await self.release.wait()
        self.messages.append(message)
        self._arrived.set()

    def close(self) -> None:
        self.closed = True

    async def wait_for(self, count: int, timeout_s: float = 10.0) -> list[InboundMessage]:
        async with asyncio.timeout(timeout_s):
            while len(self.messages) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.messages
