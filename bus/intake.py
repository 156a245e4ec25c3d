"""The delivery contract's first rule, as a type: a channel's inbound sender.

`await inbound.send(message)` returns only once the message is durable (in the profile's
write-ahead log in one process, in a JetStream stream in a cluster; in tests, on the in-memory
pipe). A channel acknowledges the platform (a webhook's 2xx, Telegram's offset, Slack's ack,
IMAP `\\Seen`) only after that call returns, so a crash never loses what a platform was told was
handled. A message the gateway already has (same channel, chat and `message_id`: a platform's
retry) returns normally without being stored twice; acknowledge it as usual.

When the backlog is full the call raises `InboundRefused` and stores nothing: answer the
platform 429/503 with `Retry-After` (webhooks), or stop polling for `retry_after_s`.

A sender the channel's allow list refuses is answered by the gateway (a notice, at most once an
hour) and `send` returns normally, except on a channel that answers refusals itself
(`Channel.answers_refusals`, the HTTP API): there it raises `SenderRefused` with the notice.
"""

from __future__ import annotations

from typing import Literal, Protocol

from bus.envelope import InboundMessage
from bus.errors import ErrorKind, GatewayError

RefusalScope = Literal["chat", "global"]


class InboundRefused(GatewayError):
    """The gateway cannot take a message now; nothing was stored, the platform should retry."""

    def __init__(self, scope: RefusalScope, retry_after_s: float, detail: str) -> None:
        super().__init__(
            ErrorKind.RATE_LIMITED,
            detail,
            suggestion=f"retry after {retry_after_s:g} s",
            status=429 if scope == "chat" else 503,
            retry_after_s=retry_after_s,
        )
        self.scope: RefusalScope = scope

    @property
    def http_status(self) -> int:
        """429 when one chat's backlog is full, 503 when the whole profile's is."""
        return 429 if self.scope == "chat" else 503


class SenderRefused(Exception):
    """The channel's allow list refuses the sender: nothing was stored and no reply will come;
    `notice` is what to tell them (their id, or a pairing code)."""

    def __init__(self, notice: str) -> None:
        super().__init__(notice)
        self.notice = notice


class InboundSender(Protocol):
    """What a channel's `start()` receives: where its platform's messages go."""

    async def send(self, message: InboundMessage) -> None:
        """Return once `message` is durable; raise `InboundRefused` when it cannot be taken,
        `SenderRefused` for a refused sender on a channel that answers refusals itself,
        `PipeClosed` once the gateway stops taking messages."""

    def close(self) -> None:
        """This channel sends no more; idempotent."""
