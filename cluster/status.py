"""Which worker runs which turn, in the domain's words, seen from every process.

A worker publishes `AgentMessage(TaskUpdate{InProgress{agent_id: worker}})` when a turn starts
and `AgentMessage(TaskComplete)` when it ends, on the core NATS subject `{prefix}.status` (not
stored: a lost update only makes the board stale until the next one). Every process keeps a
`StatusBoard` of the turns running now, for `/readyz` and the status page.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg

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
from cluster.connection import NATS_ERRORS
from cluster.follower import SubjectFollower, read_notice

log = structlog.get_logger(__name__)

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
