"""The phone platforms' side of a chat (Twilio SMS, WhatsApp): an allowed number writes by a
signed webhook posted to the daemon's own HTTP server at `path`, and the bot's replies are what
the fake's messages API was asked to send to that number."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from tests.e2e.echo_bot import WaitingFake, WebhookBot, barrier_marker


class PhoneFake(WaitingFake, Protocol):
    def texts_to(self, number: str) -> list[str]: ...


Fake = TypeVar("Fake", bound=PhoneFake)


@dataclass
class PhoneBot(WebhookBot[Fake], Generic[Fake]):
    """Each test talks from a number of its own (`numbers`: the allowed ones, in turn)."""

    numbers: Iterator[str]

    @abstractmethod
    async def say(self, number: str, text: str) -> int:
        """Post `text` from `number` to the webhook; the daemon's HTTP status."""

    def shown(self, number: str) -> list[str]:
        return self.fake.texts_to(number)

    async def barrier(self, number: str) -> None:
        """Another message from `number`, taken (200) and answered: everything before it was
        delivered."""
        marker = barrier_marker()
        assert await self.say(number, marker) == 200
        await self.reply_shown(number, marker)
