"""A channel's `start()` as a task for a test: receiving inside the block, ended after it.

The platform test helpers (`running` for Telegram, `run_bot` for Discord, `run_slack`, the
LINE fixture) share this skeleton: start, wait until the channel receives (`ready`, given the
task so it can notice a `start()` that ended early), and on the way out `stop()`, wait for
`start()` to end and raise what it raised (a test that cancelled it on purpose gets nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from bus import InboundSender
from channels.base import Channel

WAIT_S = 10.0

Ready = Callable[[asyncio.Task[None]], Awaitable[None]]


@asynccontextmanager
async def started(
    channel: Channel, inbound: InboundSender, ready: Ready, *, name: str
) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(channel.start(inbound), name=name)
    try:
        async with asyncio.timeout(WAIT_S):
            await ready(task)
        yield task
    finally:
        await channel.stop()
        done, _ = await asyncio.wait({task}, timeout=WAIT_S)
    assert task in done, "start() did not end after stop()"
    if not task.cancelled() and (error := task.exception()) is not None:
        raise error
