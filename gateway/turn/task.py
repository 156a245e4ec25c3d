"""A recorded turn as the domain's `bus.Task`: Pending -> InProgress{agent} -> Completed/Failed.

The journal stores each turn's task, with a `TaskResult` carrying its token usage, so the log
and `/status` speak octos-core's language rather than a private one.

The task is recorded once, finished, and a turn keeps only what varies from one task to the
next (`TurnTask`: its id, usage, failure and time). `as_task()` is the `bus.Task` itself, in the
state the walk Pending -> InProgress -> Completed or Failed gives (the state diagram has that
walk; tests/gateway/test_turn_task.py checks both). `wire_json()` is the same task's JSON, the
bytes the model serializes to, with the fields that never vary serialized once from the model:
building and validating the pydantic task for every turn, only to serialize it, cost about a
twentieth of a turn's CPU, and serializing the unvarying fields again each turn half of what
was left.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pydantic_core

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
    from gateway.turn.outcome import Answer

_TURN_KIND = CustomKind(name="turn")
_CONTEXT = TaskContext(working_dir=Path("."))
_COMPLETED = CompletedStatus()


def _result_head(success: bool) -> bytes:
    """`TaskResult(success=...)` as JSON up to its last field's value, the token usage."""
    whole = pydantic_core.to_json(TaskResult(success=success))
    tail = pydantic_core.to_json(TokenUsage()) + b"}"
    if not whole.endswith(tail):
        raise RuntimeError("a TaskResult's JSON no longer ends with its token usage")
    return whole[: -len(tail)]


# A turn's task as JSON is these pieces (the model's own serialization, done once) around the
# few values that vary: id, status, success, usage and time.
_ID = b'{"id":'
_STATUS = b',"parent_id":null,"status":'
_COMPLETED_JSON = pydantic_core.to_json(_COMPLETED)
_RESULT = (
    b',"kind":'
    + pydantic_core.to_json(_TURN_KIND)
    + b',"context":'
    + pydantic_core.to_json(_CONTEXT)
    + b',"result":'
)
_RESULT_HEADS = {success: _result_head(success) for success in (True, False)}
_CREATED_AT = b'},"created_at":'
_UPDATED_AT = b',"updated_at":'


@dataclass(frozen=True, slots=True)
class TurnTask:
    """The finished task of one agent turn."""

    # The usage and failure of the turn's `Answer`, copied rather than the answer held: a task
    # read back from the journal has no turn messages to make an `Answer` of.
    id: str
    usage: TokenUsage
    at: datetime
    failed: bool = False
    error: str | None = None

    @classmethod
    def of(cls, turn_id: str, answer: Answer) -> TurnTask | None:
        """The task of a turn's answer; None for answers that are not turns (commands)."""
        if not answer.is_turn:
            return None
        error = (answer.error or "failed") if answer.failed else None
        return cls(turn_id, answer.usage, utc_now(), answer.failed, error)

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

    def wire_json(self) -> bytes:
        """`as_task()` as JSON, the bytes pydantic-core writes for the model, in its field
        order: the pieces that never vary are serialized once, not once a turn."""
        status = pydantic_core.to_json(self._status()) if self.failed else _COMPLETED_JSON
        at = pydantic_core.to_json(self.at)
        return b"".join(
            (
                _ID,
                pydantic_core.to_json(self.id),
                _STATUS,
                status,
                _RESULT,
                _RESULT_HEADS[not self.failed],
                self.usage.__pydantic_serializer__.to_json(self.usage),
                _CREATED_AT,
                at,
                _UPDATED_AT,
                at,
                b"}",
            )
        )
