"""An inbound sender whose backlog is full for the first few messages, then takes them."""

from __future__ import annotations

from bus import InboundMessage, InboundRefused


class RefusingSender:
    def __init__(self, refusals: int, *, retry_after_s: float = 7.0) -> None:
        self.refusals = refusals
        self.retry_after_s = retry_after_s
        self.taken: list[InboundMessage] = []

    async def send(self, message: InboundMessage) -> None:
        if self.refusals > 0:
            self.refusals -= 1
            raise InboundRefused("chat", self.retry_after_s, "this chat's backlog is full")
        self.taken.append(message)

    def close(self) -> None:
        """Nothing to release."""
