"""A channel's waits: racing work against a stop event, and waiting out a full backlog.

`until_stopped` runs one awaitable as a named task beside a watcher of the event and returns
its result, or None once the event is set first (the work is then cancelled and collected).
`sleep_unless_set` is the same race for a pause, with the sleep injectable so tests run it
on a fake clock. Both collect every task they start before returning: no task outlives them,
and a cancellation of the caller still propagates after the children are collected.

`until_taken` waits out a full gateway backlog for a channel whose platform does not deliver
again: a webhook answers 429/503 and the platform retries (`channels.web.webhook`), but a
channel that receives over a socket or a sync loop (Discord, Matrix, QQ's gateway, the WeCom
bot, email) keeps the message, pauses for the `retry_after_s` the refusal names and offers it
again, so nothing is lost and the platform's stream is slowed down instead of dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import structlog

from bus import InboundRefused

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]


async def until_stopped(
    work: Coroutine[Any, Any, T], stopping: asyncio.Event, *, name: str
) -> T | None:
    """The result of `work`, or None once `stopping` is set first (then `work` is cancelled).

    An exception `work` raises is raised here. A `work` that is already late (the event set
    before the call) is closed without being started.
    """
    if stopping.is_set():
        work.close()
        return None
    task = asyncio.create_task(work, name=name)
    watcher = asyncio.create_task(stopping.wait(), name=f"{name}:stop-watcher")
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watcher):
            pending.cancel()
        # Waiting (rather than awaiting each task) lets our own cancellation propagate
        # while the children's expected CancelledError stays theirs.
        await asyncio.wait({task, watcher})
    if task.cancelled():
        return None
    return task.result()


async def sleep_unless_set(
    event: asyncio.Event, delay_s: float, sleep: Sleep = asyncio.sleep
) -> bool:
    """Wait `delay_s` with `sleep`, or less if `event` is set first; True if it was set."""

    async def sleep_through() -> None:
        await sleep(delay_s)

    await until_stopped(sleep_through(), event, name="sleep")
    return event.is_set()


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
