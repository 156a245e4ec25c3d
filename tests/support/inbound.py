"""An `InboundSender` for channel tests: records what a channel publishes, and can hold a send
(to see that the platform is not acknowledged before it returns) or refuse the next one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from bus import InboundMessage, InboundRefused

WAIT_S = 10.0


@dataclass
class RecordingInbound:
    """An `InboundSender` that records messages; it can hold each send or refuse the next."""

    messages: list[InboundMessage] = field(default_factory=list)
    hold: asyncio.Event | None = None
    refuse_next: InboundRefused | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set once a send is waiting on `hold`.
    entered: asyncio.Event = field(default_factory=asyncio.Event)

    async def send(self, message: InboundMessage) -> None:
        if self.refuse_next is not None:
            refusal, self.refuse_next = self.refuse_next, None
            raise refusal
        if self.hold is not None:
            self.entered.set()
            await self.hold.wait()
        self.messages.append(message)
        self.changed.set()

    def close(self) -> None:
        """Nothing to release."""

    async def wait_for(self, count: int) -> list[InboundMessage]:
        async with asyncio.timeout(WAIT_S):
            while len(self.messages) < count:
                self.changed.clear()
                await self.changed.wait()
        return self.messages
