"""The loop of one durable pull consumer: fetch one message, hand it over, until asked to stop.

Used by workers (one loop per inbound partition) and ingress processes (one per outbound
partition, plus their own reply consumer). A stop ends the wait for the next message at once;
a message in hand is finished first. A connection that drops is waited out (nats-py
reconnects): the loop only logs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from cluster.connection import NATS_ERRORS

log = structlog.get_logger(__name__)

#: How long one fetch waits on the server for a message before it asks again.
FETCH_WAIT_S = 5.0
#: The pause after a failed fetch (the server or the connection is away).
FETCH_FAILED_PAUSE_S = 1.0

Handler = Callable[[Msg], Awaitable[None]]


async def pull_forever(
    js: JetStreamContext, stream: str, durable: str, handle: Handler, stopping: asyncio.Event
) -> None:
    subscription = await js.pull_subscribe_bind(durable=durable, stream=stream)
    stop = asyncio.create_task(stopping.wait(), name=f"stop-watch:{durable}")
    try:
        while not stopping.is_set():
            fetch = asyncio.create_task(
                subscription.fetch(1, timeout=FETCH_WAIT_S), name=f"fetch:{durable}"
            )
            try:
                await asyncio.wait({fetch, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not fetch.done():
                    fetch.cancel()
                    # nats-py turns the cancellation into its TimeoutError: collect it.
                    await asyncio.gather(fetch, return_exceptions=True)
            if stopping.is_set() and (fetch.cancelled() or fetch.exception() is not None):
                break  # nothing in hand: a message fetched just now is still handled
            try:
                messages = fetch.result()
            except TimeoutError:
                continue
            except NATS_ERRORS as error:
                log.warning("cluster.fetch_failed", consumer=durable, error=str(error))
                await asyncio.sleep(FETCH_FAILED_PAUSE_S)
                continue
            for msg in messages:
                try:
                    await handle(msg)
                except NATS_ERRORS as error:
                    # Its ack (or nak) did not reach the server: it is delivered again later.
                    log.warning("cluster.ack_failed", consumer=durable, error=str(error))
    finally:
        stop.cancel()
        # A closing connection makes the server forget the subscription anyway.
        with contextlib.suppress(*NATS_ERRORS):
            await subscription.unsubscribe()
