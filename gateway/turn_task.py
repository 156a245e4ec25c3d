"""A recorded turn as the domain's `bus.Task`: Pending -> InProgress{agent} -> Completed/Failed.

The journal stores each turn's task, with a `TaskResult` carrying its token usage, so the log
and `/status` speak octos-core's language rather than a private one.

The task is recorded once, finished, and a turn keeps only what varies from one task to the
next (`TurnTask`: its id, usage, failure and time). `as_task()` is the `bus.Task` itself, in the
state the walk Pending -> InProgress -> Completed or Failed gives (the state diagram has that
walk; tests/gateway/test_turn_task.py checks both). `wire()` is the same task's JSON form, the
fields that never vary serialized once from the model: building and validating the pydantic
task for every turn, only to serialize it, cost about a twentieth of a turn's CPU.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bus import (
    CompletedStatus,
    CustomKind,
    FailedStatus,
    Task,
    TaskContext,
    TaskId,
    TaskResult,
    TokenUsage,
)
from bus.message import utc_now

if TYPE_CHECKING:
    from gateway.turns import TurnResult

_TURN_KIND = CustomKind(name="turn")
_CONTEXT = TaskContext(working_dir=Path("."))
_COMPLETED = CompletedStatus()
_KIND_WIRE = _TURN_KIND.model_dump(mode="json")
_CONTEXT_WIRE = _CONTEXT.model_dump(mode="json")
_COMPLETED_WIRE = _COMPLETED.model_dump(mode="json")
_RESULT_WIRE = TaskResult(success=True).model_dump(mode="json")


@dataclass(frozen=True, slots=True)
class TurnTask:
    """The finished task of one agent turn."""

    id: str
    usage: TokenUsage
    at: datetime
    failed: bool = False
    error: str | None = None

    @classmethod
    def of(cls, turn_id: str, result: TurnResult | None) -> TurnTask | None:
        """The task of a turn's result; None for answers that are not turns (commands)."""
        if result is None:
            return None
        error = (result.error or "failed") if result.failed else None
        return cls(turn_id, result.usage, utc_now(), result.failed, error)

    @classmethod
    def from_task(cls, task: Task) -> TurnTask:
        """A recorded turn's task read back; ValueError for a task no turn records."""
        if task.kind != _TURN_KIND or task.result is None:
            raise ValueError(f"task {task.id} is not a turn's task")
        failed = isinstance(task.status, FailedStatus)
        error = task.status.error if isinstance(task.status, FailedStatus) else None
        return cls(str(task.id), task.result.token_usage, task.created_at, failed, error)

    def _status(self) -> CompletedStatus | FailedStatus:
        return FailedStatus(error=self.error or "failed") if self.failed else _COMPLETED

    def as_task(self) -> Task:
        outcome = TaskResult(success=not self.failed, output="", token_usage=self.usage)
        # Every field given: `model_construct` calls no default factory.
        return Task.model_construct(
            id=TaskId(uuid.UUID(self.id)),
            kind=_TURN_KIND,
            context=_CONTEXT,
            status=self._status(),
            result=outcome,
            parent_id=None,
            created_at=self.at,
            updated_at=self.at,
        )

    def wire(self) -> dict[str, Any]:
        """`as_task()` as the journal writes it (pydantic-core serializes the usage and the
        times as the model would), in the model's field order."""
        status = self._status().model_dump(mode="json") if self.failed else _COMPLETED_WIRE
        result = {**_RESULT_WIRE, "success": not self.failed, "token_usage": self.usage}
        return {
            "id": self.id,
            "parent_id": None,
            "status": status,
            "kind": _KIND_WIRE,
            "context": _CONTEXT_WIRE,
            "result": result,
            "created_at": self.at,
            "updated_at": self.at,
        }
