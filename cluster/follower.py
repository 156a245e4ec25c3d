"""Following one core NATS subject: subscribed by `follow`, let go by `unfollow`.

The status board, a bounded worker's arrival notices and the cancel notices are all hints on
core NATS, handled as they come; this is what they share.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import ClassVar, TypeVar

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import DEFAULT_SUB_PENDING_MSGS_LIMIT, Subscription

from cluster.connection import NATS_ERRORS

log = structlog.get_logger(__name__)

Notice = TypeVar("Notice")


class SubjectFollower:
    """A subclass handles each message of the subject in `_on_message`."""

    #: Messages held for a follower that falls behind, before core NATS drops them.
    PENDING_MESSAGES: ClassVar[int] = DEFAULT_SUB_PENDING_MSGS_LIMIT

    def __init__(self) -> None:
        self._subscription: Subscription | None = None

    async def follow(self, client: Client, subject: str) -> None:
        self._subscription = await client.subscribe(
            subject, cb=self._on_message, pending_msgs_limit=self.PENDING_MESSAGES
        )

    async def unfollow(self) -> None:
        if self._subscription is not None:
            # A closing connection ends the subscription anyway: nothing arrives after it.
            with contextlib.suppress(*NATS_ERRORS):
                await self._subscription.unsubscribe()
            self._subscription = None

    async def _on_message(self, msg: Msg) -> None:
        raise NotImplementedError


def read_notice(msg: Msg, parse: Callable[[bytes], Notice], unreadable: str) -> Notice | None:
    """`msg`'s body as `parse` reads it; None, logged as `unreadable`, when it cannot: a hint
    this build does not read is dropped (nothing redelivers core NATS)."""
    try:
        return parse(msg.data)
    except ValueError as error:
        log.warning(unreadable, error=str(error))
        return None
