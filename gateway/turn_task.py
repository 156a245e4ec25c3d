"""A recorded turn as the domain's `bus.Task`: Pending -> InProgress{agent} -> Completed/Failed.

The journal stores each turn's task, with a `TaskResult` carrying its token usage, so the log
and `/status` speak octos-core's language rather than a private one.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from bus import (
    AgentId,
    CompletedStatus,
    CustomKind,
    FailedStatus,
    InProgressStatus,
    Task,
    TaskContext,
    TaskId,
    TaskResult,
)

if TYPE_CHECKING:
    from gateway.turns import TurnResult

_TURN_KIND = CustomKind(name="turn")
_CONTEXT = TaskContext(working_dir=Path("."))


def turn_task(turn_id: str, agent: str, result: TurnResult | None) -> Task | None:
    """The finished task of an agent turn; None for answers that are not turns (commands)."""
    if result is None:
        return None
    task = Task(id=TaskId(uuid.UUID(turn_id)), kind=_TURN_KIND, context=_CONTEXT)
    task = task.transition(InProgressStatus(agent_id=AgentId(agent)))
    outcome = TaskResult(success=not result.failed, output="", token_usage=result.usage)
    if result.failed:
        return task.transition(FailedStatus(error=result.error or "failed"), result=outcome)
    return task.transition(CompletedStatus(), result=outcome)
