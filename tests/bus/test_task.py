"""Task: the state machine, ids, kinds and the wire format."""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError

from bus import (
    TASK_TRANSITIONS,
    AgentId,
    BlockedStatus,
    CodeKind,
    CompletedStatus,
    CustomKind,
    EpisodeRef,
    ErrorKind,
    FailedStatus,
    GatewayError,
    GitState,
    InProgressStatus,
    InvalidStateTransition,
    Message,
    PendingStatus,
    PlanKind,
    ReviewKind,
    Task,
    TaskContext,
    TaskKind,
    TaskResult,
    TaskStatus,
    TestKind,
    TokenUsage,
    can_transition,
    new_task_id,
)

STATUSES: dict[str, TaskStatus] = {
    "pending": PendingStatus(),
    "in_progress": InProgressStatus(agent_id=AgentId("agent-1")),
    "blocked": BlockedStatus(reason="waiting for review"),
    "completed": CompletedStatus(),
    "failed": FailedStatus(error="boom"),
}

LEGAL = {
    ("pending", "in_progress"),
    ("in_progress", "blocked"),
    ("in_progress", "completed"),
    ("in_progress", "failed"),
    ("blocked", "in_progress"),
    ("blocked", "failed"),
}

ALL_PAIRS = list(itertools.product(STATUSES, STATUSES))

CONTEXT = TaskContext(working_dir=Path("/srv/repo"))


def _task_in(state: str) -> Task:
    task = Task(kind=PlanKind(goal="ship it"), context=CONTEXT)
    return task.model_copy(update={"status": STATUSES[state]})


def test_the_table_is_the_seed_diagram() -> None:
    table = {(a, b) for a, targets in TASK_TRANSITIONS.items() for b in targets}
    assert table == LEGAL


@pytest.mark.parametrize(("before", "after"), sorted(LEGAL))
def test_legal_transitions(before: str, after: str) -> None:
    task = _task_in(before)
    moved = task.transition(STATUSES[after])
    assert moved.status == STATUSES[after]
    assert moved.id == task.id
    assert moved.created_at == task.created_at
    assert moved.updated_at >= task.updated_at
    assert task.status == STATUSES[before], "the original task is unchanged"
    assert can_transition(STATUSES[before], STATUSES[after])


@pytest.mark.parametrize(("before", "after"), [p for p in ALL_PAIRS if p not in LEGAL])
def test_illegal_transitions_raise(before: str, after: str) -> None:
    task = _task_in(before)
    with pytest.raises(InvalidStateTransition) as caught:
        task.transition(STATUSES[after])
    error = caught.value
    assert (error.from_state, error.to_state) == (before, after)
    assert isinstance(error, GatewayError)
    assert error.kind is ErrorKind.INVALID_STATE_TRANSITION
    assert before in str(error)
    assert after in str(error)
    assert not can_transition(STATUSES[before], STATUSES[after])


def test_illegal_transition_suggests_the_legal_ones() -> None:
    with pytest.raises(InvalidStateTransition) as caught:
        _task_in("blocked").transition(CompletedStatus())
    assert caught.value.suggestion == "From blocked a task can only move to: failed, in_progress"
    with pytest.raises(InvalidStateTransition) as finished:
        _task_in("failed").transition(PendingStatus())
    assert finished.value.suggestion is not None
    assert "finished" in finished.value.suggestion


def test_full_life_with_a_result() -> None:
    result = TaskResult(success=True, output="done", token_usage=TokenUsage(input_tokens=5))
    task = Task(kind=TestKind(command="pytest"), context=CONTEXT)
    assert isinstance(task.status, PendingStatus)
    assert not task.is_finished
    working = task.transition(InProgressStatus(agent_id=AgentId("a")))
    blocked = working.transition(BlockedStatus(reason="needs input"))
    resumed = blocked.transition(InProgressStatus(agent_id=AgentId("b")))
    done = resumed.transition(CompletedStatus(), result=result)
    assert done.result == result
    assert done.is_finished
    assert Task.from_json(done.to_json()) == done


def test_task_ids_are_uuid7_and_time_ordered() -> None:
    ids = [new_task_id() for _ in range(200)]
    assert all(isinstance(i, uuid.UUID) and i.version == 7 for i in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_subtask_points_at_its_parent() -> None:
    parent = Task(kind=PlanKind(goal="g"), context=CONTEXT)
    child = parent.subtask(ReviewKind(diff="--- a\n+++ b"))
    assert child.parent_id == parent.id
    assert child.context == parent.context
    assert isinstance(child.status, PendingStatus)
    assert child.id > parent.id


KINDS: list[TaskKind] = [
    PlanKind(goal="plan the release"),
    CodeKind(instruction="fix it", files=[Path("src/a.py"), Path("src/b.py")]),
    ReviewKind(diff="@@ -1 +1 @@"),
    TestKind(command="pytest -q"),
    CustomKind(name="translate", params={"to": "zh", "texts": ["a", "b"]}),
]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.type)
def test_every_kind_round_trips_with_its_tag(kind: TaskKind) -> None:
    task = Task(kind=kind, context=CONTEXT)
    data = json.loads(task.to_json())
    assert data["kind"]["type"] == kind.type
    assert Task.from_json(task.to_json()).kind == kind


@pytest.mark.parametrize("status", list(STATUSES.values()), ids=list(STATUSES))
def test_every_status_round_trips_with_its_tag(status: TaskStatus) -> None:
    task = Task(kind=PlanKind(goal="g"), context=CONTEXT, status=status)
    restored = Task.from_json(task.to_json())
    assert restored.status == status
    assert type(restored.status) is type(status)
    if not isinstance(status, PendingStatus):  # pending is the default and left out
        assert json.loads(task.to_json())["status"]["type"] == status.type


def test_status_variants_carry_only_their_own_data() -> None:
    with pytest.raises(ValidationError):
        Task.from_json(
            '{"kind": {"type": "plan", "goal": "g"}, "context": {"working_dir": "/"},'
            ' "status": {"type": "in_progress"}}'
        )
    with pytest.raises(ValidationError):
        Task.from_json(
            '{"kind": {"type": "plan", "goal": "g"}, "context": {"working_dir": "/"},'
            ' "status": {"type": "sleeping"}}'
        )


def test_minimal_payload_reads_with_defaults() -> None:
    task = Task.from_json(
        '{"kind": {"type": "review", "diff": "d"}, "context": {"working_dir": "."}}'
    )
    assert isinstance(task.status, PendingStatus)
    assert task.parent_id is None
    assert task.result is None
    assert task.context.git_state is None
    assert task.context.working_memory == []
    assert task.id.version == 7


def test_context_round_trips() -> None:
    context = TaskContext(
        working_dir=Path("/srv/repo"),
        git_state=GitState(branch="main", dirty=True, head="abc123"),
        working_memory=[Message.user("what changed?"), Message.assistant("two files")],
        episodic_refs=[EpisodeRef(episode_id="ep-1", summary="last deploy", relevance=0.8)],
        files_in_scope=[Path("README.md")],
    )
    task = Task(kind=PlanKind(goal="g"), context=context, parent_id=new_task_id())
    assert Task.from_json(task.to_json()) == task
    data = json.loads(TaskContext(working_dir=Path("/x")).to_json())
    assert data == {"working_dir": "/x"}
