"""The finished task a turn records is the one Task.transition's walk would give."""

from __future__ import annotations

from pathlib import Path

import pydantic_core
import pytest

from bus import (
    AgentId,
    CompletedStatus,
    CustomKind,
    FailedStatus,
    InProgressStatus,
    Message,
    SessionKey,
    Task,
    TaskContext,
    TokenUsage,
    new_turn_id,
)
from bus.task import can_transition
from gateway.turn.outcome import Answer
from gateway.turn.task import TurnTask

CHAT = SessionKey.parse("p:rec:c1")

_IGNORED = {"created_at", "updated_at"}


def _walked(built: Task, final: CompletedStatus | FailedStatus) -> Task:
    pending = Task(id=built.id, kind=built.kind, context=built.context)
    running = pending.transition(InProgressStatus(agent_id=AgentId("echo")))
    return running.transition(final, result=built.result)


@pytest.mark.parametrize("failed", [False, True])
def test_the_task_is_what_the_state_diagram_walk_gives(failed: bool) -> None:
    usage = TokenUsage(input_tokens=3, output_tokens=5)
    result = Answer(
        "hello",
        SessionKey.parse("p:rec:c1"),
        [Message.user("hi")],
        failed=failed,
        error="boom",
        usage=usage,
    )
    turn = str(new_turn_id())
    recorded = TurnTask.of(turn, result)
    assert recorded is not None
    task = recorded.as_task()
    final = FailedStatus(error="boom") if failed else CompletedStatus()
    walked = _walked(task, final)
    assert task.model_dump(exclude=_IGNORED) == walked.model_dump(exclude=_IGNORED)
    assert str(task.id) == turn
    assert task.result is not None
    assert task.result.token_usage == usage
    assert task.is_finished
    # Built like this, it still reads back as a valid Task from its JSON (the journal's form).
    assert Task.model_validate_json(task.model_dump_json()) == task


@pytest.mark.parametrize("failed", [False, True])
@pytest.mark.parametrize("error", ["boom", 'a "quoted"\nline, ünïcode 🙂', None])
@pytest.mark.parametrize(
    "usage",
    [
        TokenUsage(input_tokens=3, output_tokens=5),
        TokenUsage(),
        TokenUsage(
            input_tokens=10**9,
            output_tokens=7,
            reasoning_tokens=2,
            cache_read_tokens=4,
            cache_write_tokens=1,
        ),
    ],
)
def test_the_journal_form_is_the_task_serialized_and_reads_back_as_the_same_turn(
    failed: bool, error: str | None, usage: TokenUsage
) -> None:
    # The JSON is built from pieces serialized once: byte for byte what the model writes.
    result = Answer(
        "hello",
        SessionKey.parse("p:rec:c1"),
        [Message.user("hi")],
        failed=failed,
        error=error,
        usage=usage,
    )
    recorded = TurnTask.of(str(new_turn_id()), result)
    assert recorded is not None
    wire = recorded.wire_json()
    assert wire == pydantic_core.to_json(recorded.as_task())
    assert TurnTask.from_task(Task.model_validate_json(wire)) == recorded


def test_a_task_no_turn_records_is_refused_on_reading_back() -> None:
    other = Task(kind=CustomKind(name="build"), context=TaskContext(working_dir=Path(".")))
    with pytest.raises(ValueError, match="not a turn's task"):
        TurnTask.from_task(other)


def test_a_finished_turn_passed_through_in_progress() -> None:
    running = InProgressStatus(agent_id=AgentId("echo"))
    assert can_transition(
        Task(kind=CustomKind(name="turn"), context=TaskContext(working_dir=Path("."))).status,
        running,
    )
    assert can_transition(running, CompletedStatus())
    assert can_transition(running, FailedStatus(error="x"))


def test_a_command_has_no_task() -> None:
    assert TurnTask.of(str(new_turn_id()), Answer.said(CHAT, "Unknown command /x.")) is None
