"""Waiting out a full gateway backlog, for channels whose platform does not deliver again.

A webhook answers a full backlog with 429/503 and the platform retries (`channels.web.webhook`).
A channel that receives over a socket or a sync loop (Discord, Matrix, QQ's gateway, the WeCom
bot, email) has nobody to retry for it: it keeps the message, pauses for the `retry_after_s`
the refusal names, and offers it again, so nothing is lost and the platform's stream is slowed
down instead of dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from bus import InboundRefused
from channels.stopping import sleep_unless_set

log = structlog.get_logger(__name__)

#: The pause when a refusal names none.
DEFAULT_PAUSE_S = 1.0


async def until_taken(
    attempt: Callable[[], Awaitable[None]],
    *,
    event: str,
    stopping: asyncio.Event | None = None,
    **context: object,
) -> bool:
    """Run `attempt` until the gateway takes it (True); each refusal is logged as `event` and
    waited out. False when `stopping` is set during a pause: the message was not taken."""
    while True:
        try:
            await attempt()
            return True
        except InboundRefused as refused:
            wait_s = refused.retry_after_s or DEFAULT_PAUSE_S
            log.warning(event, reason=refused.message, retry_in_s=wait_s, **context)
            if stopping is None:
                await asyncio.sleep(wait_s)
            elif await sleep_unless_set(stopping, wait_s):
                return False
