"""A recorded turn as the domain's `bus.Task`: Pending -> InProgress{agent} -> Completed/Failed.

The journal stores each turn's task, with a `TaskResult` carrying its token usage, so the log
and `/status` speak octos-core's language rather than a private one.

The task is recorded once, finished: it is built in its final state directly rather than walked
through `Task.transition` (two validated copies a turn, about a tenth of a turn's CPU). The walk
it stands for, Pending -> InProgress -> Completed or Failed, is one the state diagram has, and
the result is the task that walk would give (tests/gateway/test_turn_task.py checks both).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from bus import (
    CompletedStatus,
    CustomKind,
    FailedStatus,
    Task,
    TaskContext,
    TaskId,
    TaskResult,
)
from bus.message import utc_now

if TYPE_CHECKING:
    from gateway.turns import TurnResult

_TURN_KIND = CustomKind(name="turn")
_CONTEXT = TaskContext(working_dir=Path("."))
_COMPLETED = CompletedStatus()


def turn_task(turn_id: str, result: TurnResult | None) -> Task | None:
    """The finished task of an agent turn; None for answers that are not turns (commands)."""
    if result is None:
        return None
    status = FailedStatus(error=result.error or "failed") if result.failed else _COMPLETED
    outcome = TaskResult(success=not result.failed, output="", token_usage=result.usage)
    now = utc_now()
    # Every field given: `model_construct` calls no default factory (pydantic inspects the
    # signature of each factory it calls, which costs more than validating).
    return Task.model_construct(
        id=TaskId(uuid.UUID(turn_id)),
        kind=_TURN_KIND,
        context=_CONTEXT,
        status=status,
        result=outcome,
        parent_id=None,
        created_at=now,
        updated_at=now,
    )
