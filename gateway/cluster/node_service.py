"""What a node's two services on its NATS connection share: the worker and the reply delivery.

Each pulls its stream's messages through durable consumers (`Worker` the inbound stream,
`ReplyDelivery` the outbound one), keeps a record table in PostgreSQL (`record_table`)
and counts into the cluster's metrics; `stop()` ends their pulls, and what is in hand is
finished. What each does with a message is its own.

Both count into the cluster's own Prometheus metrics: dead letters, redeliveries, replays,
replies recognised as delivered, and replies handed to the ingress showing their turn.

A long turn keeps its message with `in_progress` heartbeats: JetStream gives an unacknowledged
message to another consumer after `ack_wait`, and a worker that is alive says so every third of
it. A worker that dies stops sending, and after `ack_wait` the message is delivered again (to
any worker).

Every process sees which worker runs which turn, in the domain's words: a worker publishes
`AgentMessage(TaskUpdate{InProgress{agent_id: worker}})` when a turn starts and
`AgentMessage(TaskComplete)` when it ends, on the core NATS subject `{prefix}.status` (not stored:
a lost update only makes the board stale until the next one). Every process keeps a `StatusBoard`
of the turns running now, for `/readyz` and the status page.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from prometheus_client import CollectorRegistry, Counter

from bus import (
    AgentId,
    AgentMessage,
    InProgressStatus,
    TaskComplete,
    TaskId,
    TaskResult,
    TaskUpdate,
    TokenUsage,
)
from config.bus import NatsConfig
from gateway.cluster.connection import NATS_ERRORS
from gateway.cluster.pull import SubjectFollower, read_notice
from gateway.cluster.record_table import RecordTable
from gateway.cluster.streams import names_of


# The cluster's own families, made once on the process's registry by `create`.
@dataclass(frozen=True, slots=True)
class ClusterMetrics:
    dead_letters: Counter
    redeliveries: Counter
    replayed_replies: Counter
    dropped_duplicates: Counter
    replies_not_resent: Counter
    replies_handed_over: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> ClusterMetrics:
        def per_profile(name: str, documentation: str) -> Counter:
            return Counter(name, documentation, ["profile"], registry=registry)

        return cls(
            dead_letters=Counter(
                "octos_dead_letters",
                "Inbound messages moved to the dead-letter stream, by reason",
                ["profile", "reason"],
                registry=registry,
            ),
            redeliveries=per_profile(
                "octos_redeliveries",
                "Inbound messages a worker received again (a crash, a timeout, a retry)",
            ),
            replayed_replies=per_profile(
                "octos_replayed_replies", "Stored replies published again instead of recomputed"
            ),
            dropped_duplicates=per_profile(
                "octos_dropped_duplicates",
                "Platform retries recognised by their inbound id and not answered again",
            ),
            replies_not_resent=per_profile(
                "octos_replies_not_resent",
                "Replies offered again whose delivery was recorded already: acknowledged, "
                "not sent twice",
            ),
            replies_handed_over=per_profile(
                "octos_replies_handed_over",
                "Replies handed to the ingress that showed their turn's snapshots and typing, "
                "which delivered them in the message it was editing",
            ),
        )


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


#: A turn not heard of for this long is dropped from the board (its worker died).
STALE_AFTER_S = 900.0


@dataclass(frozen=True, slots=True)
class RunningTurn:
    task_id: str
    worker: str
    since: float


class StatusPublisher:
    def __init__(self, client: Client, subject: str, worker_id: str) -> None:
        self._client = client
        self._subject = subject
        self.worker_id = worker_id

    async def _publish(self, message: AgentMessage) -> None:
        try:
            await self._client.publish(self._subject, message.to_json().encode("utf-8"))
        except NATS_ERRORS as error:
            log.debug("cluster.status_not_sent", error=str(error) or type(error).__name__)

    async def started(self, turn_id: str) -> None:
        status = InProgressStatus(agent_id=AgentId(self.worker_id))
        task_id = TaskId(uuid.UUID(turn_id))
        await self._publish(AgentMessage(TaskUpdate(task_id=task_id, status=status)))

    async def finished(self, turn_id: str, *, success: bool, usage: TokenUsage) -> None:
        result = TaskResult(success=success, output="", token_usage=usage)
        task_id = TaskId(uuid.UUID(turn_id))
        await self._publish(AgentMessage(TaskComplete(task_id=task_id, result=result)))


class StatusBoard(SubjectFollower):
    """The turns running in the cluster now, from the status subject."""

    def __init__(self) -> None:
        super().__init__()
        self._running: dict[str, RunningTurn] = {}

    async def _on_message(self, msg: Msg) -> None:
        message = read_notice(msg, AgentMessage.from_json, "cluster.status_unreadable")
        if message is not None:
            self.apply(message)

    def apply(self, message: AgentMessage) -> None:
        variant = message.root
        task_id = str(message.task_id())
        if isinstance(variant, TaskUpdate) and isinstance(variant.status, InProgressStatus):
            self._running[task_id] = RunningTurn(
                task_id, str(variant.status.agent_id), time.monotonic()
            )
        elif isinstance(variant, TaskComplete):
            self._running.pop(task_id, None)

    def running(self) -> list[RunningTurn]:
        now = time.monotonic()
        for task_id in [t for t, turn in self._running.items() if now - turn.since > STALE_AFTER_S]:
            del self._running[task_id]
        return sorted(self._running.values(), key=lambda turn: turn.since)


Records = TypeVar("Records", bound=RecordTable)


class NodeService(Generic[Records]):
    def __init__(
        self,
        client: Client,
        js: JetStreamContext,
        config: NatsConfig,
        records: Records,
        metrics: ClusterMetrics,
    ) -> None:
        self._client = client
        self._js = js
        self._config = config
        self._names = names_of(config)
        self._records = records
        self._metrics = metrics
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Fetch no more; messages in hand are finished."""
        self._stopping.set()
