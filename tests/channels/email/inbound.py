"""An `InboundSender` a test controls: it records, can hold a message, can refuse."""

from __future__ import annotations

import asyncio

from bus import InboundMessage, InboundRefused
from tests.fakes.changes import Changes


class ScriptedInbound:
    def __init__(self) -> None:
        self.received: list[InboundMessage] = []
        self.offered: list[InboundMessage] = []
        #: While clear, `send` waits: the message is "not durable yet".
        self.durable = asyncio.Event()
        self.durable.set()
        self.refusals = 0
        self._changes = Changes()

    async def send(self, message: InboundMessage) -> None:
        self.offered.append(message)
        await self._changes.notify()
        if self.refusals:
            self.refusals -= 1
            raise InboundRefused("global", 0.05, "backlog full")
        await self.durable.wait()
        self.received.append(message)
        await self._changes.notify()

    def close(self) -> None:
        """Nothing to release."""

    async def wait_until(self, predicate: object, timeout_s: float = 10.0) -> None:
        assert callable(predicate)
        await self._changes.wait_until(predicate, timeout_s)
