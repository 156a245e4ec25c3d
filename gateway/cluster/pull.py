"""The loop of one durable pull consumer: fetch one message, hand it over, until asked to stop.

Used by workers (one loop per inbound partition) and ingress processes (one per outbound
partition, plus their own reply consumer). A stop ends the wait for the next message at once;
a message in hand is finished first. A connection that drops is waited out (nats-py
reconnects): the loop only logs.

Beside the pulls, the status board, a bounded worker's arrival notices and the cancel notices
are hints on core NATS, handled as they come: each follows one subject, subscribed by `follow`
and let go by `unfollow`.

The arrival notices wake a bounded worker's idle runners to sweep now. Without them a runner with
nothing to do would learn of a new message only at its next sweep, `fetch_wait_s` later (a request
to the HTTP API would wait that long for an idle worker). JetStream hands every message published
to a stream's subjects to core NATS subscribers too, so a worker subscribes to the inbound subjects
and each arrival wakes one idle runner (the one idle longest; with none idle, the next runner to go
idle sweeps again at once instead of waiting). The notice is only a hint: a lost one (core NATS
drops a slow subscriber's messages) costs the wait it saves, and messages offered again without a
publish (after a retry's backoff, after `ack_wait`) are found by the periodic sweep. The price is a
copy of every inbound message to every worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Awaitable, Callable
from typing import ClassVar, TypeVar

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import DEFAULT_SUB_PENDING_MSGS_LIMIT, Subscription
from nats.js import JetStreamContext

from gateway.cluster.connection import NATS_ERRORS

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


#: Notices held for a worker that falls behind before core NATS drops them (they are hints).
PENDING_NOTICES = 1024


class Arrivals(SubjectFollower):
    PENDING_MESSAGES = PENDING_NOTICES

    def __init__(self) -> None:
        super().__init__()
        #: Idle runners, longest idle first: each arrival wakes one.
        self._idle: deque[asyncio.Future[bool]] = deque()
        #: An arrival came while no runner was idle: the next to go idle must not wait.
        self._unseen = False

    def seen(self) -> None:
        """A runner is about to sweep: what arrived so far, it will find."""
        self._unseen = False

    async def next(self, stop: asyncio.Task[bool], wait_s: float) -> None:
        """Until an arrival wakes this runner, the stop, or `wait_s` (what arrives without a
        notice, a retry after its backoff, is found by the sweep that follows)."""
        if self._unseen:
            self._unseen = False
            return
        woken: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._idle.append(woken)
        try:
            await asyncio.wait({woken, stop}, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not woken.done():
                self._idle.remove(woken)
                woken.cancel()

    async def _on_message(self, _msg: Msg) -> None:
        while self._idle:
            woken = self._idle.popleft()
            if not woken.done():
                woken.set_result(True)
                return
        self._unseen = True


#: How long one fetch waits on the server for a message before it asks again.
FETCH_WAIT_S = 5.0
#: The pause after a failed fetch (the server or the connection is away).
FETCH_FAILED_PAUSE_S = 1.0

Handler = Callable[[Msg], Awaitable[None]]


async def pull_forever(
    js: JetStreamContext,
    stream: str,
    durable: str,
    handle: Handler,
    stopping: asyncio.Event,
    *,
    fetch_wait_s: float = FETCH_WAIT_S,
) -> None:
    subscription = await js.pull_subscribe_bind(durable=durable, stream=stream)
    stop = asyncio.create_task(stopping.wait(), name=f"stop-watch:{durable}")
    try:
        while not stopping.is_set():
            await _fetch_and_handle(subscription, durable, handle, stop, fetch_wait_s)
    finally:
        stop.cancel()
        # A closing connection makes the server forget the subscription anyway.
        with contextlib.suppress(*NATS_ERRORS):
            await subscription.unsubscribe()


async def _fetch_and_handle(
    subscription: JetStreamContext.PullSubscription,
    durable: str,
    handle: Handler,
    stop: asyncio.Task[bool],
    fetch_wait_s: float,
) -> bool:
    """One fetch, and the message it brought handled; returns at once when asked to stop.
    True when the message handled had more waiting behind it in its consumer."""
    fetch = asyncio.create_task(
        subscription.fetch(1, timeout=fetch_wait_s), name=f"fetch:{durable}"
    )
    try:
        await asyncio.wait({fetch, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not fetch.done():
            fetch.cancel()
            # nats-py turns the cancellation into its TimeoutError: collect it.
            await asyncio.gather(fetch, return_exceptions=True)
    try:
        messages = fetch.result()
    except (TimeoutError, asyncio.CancelledError):
        return False  # nothing came (or we stopped waiting): a message fetched is still handled
    except NATS_ERRORS as error:
        log.warning("cluster.fetch_failed", consumer=durable, error=str(error))
        await asyncio.sleep(FETCH_FAILED_PAUSE_S)
        return False
    more = False
    for msg in messages:
        more = bool(msg.metadata.num_pending)
        try:
            await handle(msg)
        except NATS_ERRORS as error:
            # Its ack (or nak) did not reach the server: it is delivered again later.
            log.warning("cluster.ack_failed", consumer=durable, error=str(error))
    return more


async def pull_bounded(
    js: JetStreamContext,
    stream: str,
    consumers: list[tuple[str, str]],
    handle: Handler,
    stopping: asyncio.Event,
    *,
    max_in_hand: int,
    fetch_wait_s: float,
    arrivals: Arrivals,
) -> None:
    """At most `max_in_hand` messages held at once over many partition consumers, given as
    (durable name, its filter subject).

    A held message holds its partition (`max_ack_pending=1`), so a bounded worker must not wait
    on an empty partition while others have work: each of its `max_in_hand` runners looks for
    a partition with a message waiting and none in flight (the stream's subject counts, then
    the consumer's), takes one from there, and only when none has any waits for the next
    arrival (`arrivals`) or `fetch_wait_s`, whichever comes first, and sweeps again.

    Each sweep tries the partitions in a random order (weighted by what waits in each, see
    `_partition_with_work`): runners sweeping in the same order (runner 0 of every worker, or
    each runner one step on from its last sweep) find the same partition free at the same
    moment, and all but one wait on it while other partitions have work. A runner whose
    message had more waiting behind it takes the next one of that partition without a sweep,
    up to `STAY_LIMIT` in a row.
    """
    async with asyncio.TaskGroup() as tasks:
        for runner in range(max_in_hand):
            tasks.create_task(
                _bounded_runner(
                    js, stream, consumers, handle, stopping, runner, fetch_wait_s, arrivals
                ),
                name=f"bounded-runner:{stream}:{runner}",
            )


async def _bounded_runner(
    js: JetStreamContext,
    stream: str,
    consumers: list[tuple[str, str]],
    handle: Handler,
    stopping: asyncio.Event,
    runner: int,
    fetch_wait_s: float,
    arrivals: Arrivals,
) -> None:
    subscriptions: dict[str, JetStreamContext.PullSubscription] = {}

    async def subscription(durable: str) -> JetStreamContext.PullSubscription:
        if durable not in subscriptions:
            subscriptions[durable] = await js.pull_subscribe_bind(durable=durable, stream=stream)
        return subscriptions[durable]

    stop = asyncio.create_task(stopping.wait(), name=f"stop-watch:{stream}:{runner}")
    #: The partition to take from again without a sweep, and how often that was done.
    staying: str | None = None
    stayed = 0
    try:
        while not stopping.is_set():
            arrivals.seen()
            if staying is not None and stayed < STAY_LIMIT:
                ready: str | None = staying
                stayed += 1
            else:
                ready, stayed = await _partition_with_work(js, stream, consumers), 0
            if ready is not None:
                pulled = await subscription(ready)
                more = await _fetch_and_handle(pulled, ready, handle, stop, FETCH_READY_WAIT_S)
                staying = ready if more else None
            else:
                staying = None
                await arrivals.next(stop, fetch_wait_s)
    finally:
        stop.cancel()
        for pulled in subscriptions.values():
            with contextlib.suppress(*NATS_ERRORS):
                await pulled.unsubscribe()


#: How many messages in a row a runner takes from a partition that has more waiting after each
#: before it sweeps again: a message it just acknowledged frees that partition's next one for
#: it, and a sweep costs two requests; the limit lets the partitions it passes by have a turn.
STAY_LIMIT = 2

#: A partition that had a message waiting is asked this long. A free message comes at once;
#: one another runner took first leaves this runner waiting for the partition's next, idle,
#: so it gives up soon and sweeps again.
FETCH_READY_WAIT_S = 0.1


async def _partition_with_work(
    js: JetStreamContext, stream: str, consumers: list[tuple[str, str]]
) -> str | None:
    """A consumer whose partition has a message no one holds, or None.

    Partitions are tried in a random order weighted by what waits in each: every waiting
    message is as likely as any other to be the next one taken, so a chat with one message
    waiting among busy partitions waits no longer than their messages do, and the partitions
    holding the most, which would end a backlog last (their messages run one at a time),
    are drained first."""
    subjects = [subject for _durable, subject in consumers]
    try:
        info = await js.stream_info(stream, subjects_filter=_common_filter(subjects))
    except NATS_ERRORS as error:
        log.warning("cluster.stream_info_failed", stream=stream, error=str(error))
        return None
    counts = info.state.subjects or {}
    waiting = [(durable, counts[subject]) for durable, subject in consumers if counts.get(subject)]
    # A partition's next message is free only when none of it is in flight (max_ack_pending 1):
    # the stream's counts skip the empty ones, the consumer's count says which are held.
    while waiting:
        durable, _count = picked = random.choices(waiting, weights=[n for _d, n in waiting])[0]
        try:
            consumer = await js.consumer_info(stream, durable)
        except NATS_ERRORS as error:
            log.warning("cluster.consumer_info_failed", consumer=durable, error=str(error))
            return None
        if (consumer.num_pending or 0) > 0 and not consumer.num_ack_pending:
            return durable
        waiting.remove(picked)
    return None


def _common_filter(subjects: list[str]) -> str:
    """`{prefix}.in.*` for the partition subjects `{prefix}.in.{n}`."""
    return subjects[0].rsplit(".", 1)[0] + ".*"
