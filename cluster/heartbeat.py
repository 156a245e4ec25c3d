"""`in_progress` heartbeats while a message is worked on, so a long turn keeps its message.

JetStream gives an unacknowledged message to another consumer after `ack_wait`; a worker that
is alive says so every third of it. A worker that dies stops sending, and after `ack_wait` the
message is delivered again (to any worker).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from nats.aio.msg import Msg

from cluster.connection import NATS_ERRORS

log = structlog.get_logger(__name__)


async def _beat(msg: Msg, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            await msg.in_progress()
        except NATS_ERRORS as error:
            # The connection reconnects; a missed beat costs a redelivery at worst.
            log.warning("cluster.heartbeat_failed", error=str(error) or type(error).__name__)


@asynccontextmanager
async def heartbeats(msg: Msg, ack_wait_s: float) -> AsyncIterator[None]:
    # Not a TaskGroup: the body's own exception must come out as itself, not in a group.
    beating = asyncio.create_task(_beat(msg, ack_wait_s / 3), name="in-progress-heartbeat")
    try:
        yield
    finally:
        beating.cancel()
        await asyncio.gather(beating, return_exceptions=True)
