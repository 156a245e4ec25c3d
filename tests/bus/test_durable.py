"""TaskResult and SessionSummary: durable payloads with a schema version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bus import (
    SESSION_SUMMARY_SCHEMA_VERSION,
    TASK_RESULT_SCHEMA_VERSION,
    DecisionRecord,
    ErrorKind,
    FileRecord,
    GatewayError,
    PlanKind,
    SessionSummary,
    Task,
    TaskContext,
    TaskResult,
    TokenUsage,
    UnsupportedSchemaVersion,
    new_task_id,
)
from bus.task import AgentMessage


def test_task_result_round_trips() -> None:
    result = TaskResult(
        success=True,
        output="built 3 files",
        files_modified=[Path("a.py")],
        files_to_send=[Path("report.pdf")],
        subtasks=[new_task_id(), new_task_id()],
        token_usage=TokenUsage(input_tokens=100, output_tokens=20),
    )
    assert TaskResult.from_json(result.to_json()) == result


def test_task_result_always_writes_its_version_and_omits_empty_fields() -> None:
    data = json.loads(TaskResult(success=False).to_json())
    assert data == {"schema_version": 1, "success": False}
    assert next(iter(data)) == "schema_version"


def test_task_result_token_usage_leaves_zero_counters_out() -> None:
    data = json.loads(TaskResult(success=True, token_usage=TokenUsage(output_tokens=3)).to_json())
    assert data["token_usage"] == {"output_tokens": 3}


def test_task_result_without_version_is_version_one() -> None:
    result = TaskResult.from_json('{"success": true, "output": "ok"}')
    assert result.schema_version == 1
    assert result.files_to_send == []
    assert result.token_usage == TokenUsage()
    result.validate_schema_version()


@pytest.mark.parametrize("version", [2, 99, "2"])
def test_future_task_result_is_a_typed_error(version: object) -> None:
    payload = json.dumps({"schema_version": version, "success": True, "new_field": {"x": 1}})
    with pytest.raises(UnsupportedSchemaVersion) as caught:
        TaskResult.from_json(payload)
    error = caught.value
    assert (error.found, error.supported, error.payload) == (int(str(version)), 1, "TaskResult")
    assert isinstance(error, GatewayError)
    assert error.kind is ErrorKind.SERIALIZATION
    assert "upgrade" in str(error)


def test_future_version_with_a_changed_shape_is_still_the_typed_error() -> None:
    with pytest.raises(UnsupportedSchemaVersion):
        TaskResult.from_json('{"schema_version": 2, "outcome": "success"}')


def test_future_task_result_nested_in_a_task_or_message_is_refused() -> None:
    task = Task(kind=PlanKind(goal="g"), context=TaskContext(working_dir=Path(".")))
    data = json.loads(task.to_json())
    data["result"] = {"schema_version": 5, "success": True}
    with pytest.raises(UnsupportedSchemaVersion):
        Task.model_validate_json(json.dumps(data))
    message = {"type": "task_complete", "task_id": str(task.id), "result": data["result"]}
    with pytest.raises(UnsupportedSchemaVersion):
        AgentMessage.from_json(json.dumps(message))


def test_summary_round_trips() -> None:
    summary = SessionSummary(
        goal="migrate the bot to the new gateway",
        constraints=["no downtime"],
        progress_done=["config ported"],
        progress_in_progress=["sessions"],
        decisions=[
            DecisionRecord(decision="use JSONL", rationale="append-only"),
            DecisionRecord(decision="use SQLite", stale=True),
        ],
        files=[FileRecord(path="gateway.yaml", note="new format")],
        next_steps=["cut over"],
    )
    assert SessionSummary.from_json(summary.to_json()) == summary
    assert [d.decision for d in summary.active_decisions()] == ["use JSONL"]


def test_summary_leaves_empty_lists_out() -> None:
    data = json.loads(SessionSummary(goal="g").to_json())
    assert data == {"schema_version": 1, "goal": "g"}


def test_summary_without_version_is_version_one() -> None:
    summary = SessionSummary.from_json('{"goal": "g", "next_steps": ["a"]}')
    assert summary.schema_version == 1
    assert summary.next_steps == ["a"]
    summary.validate_schema_version()


def test_future_summary_is_a_typed_error() -> None:
    with pytest.raises(UnsupportedSchemaVersion) as caught:
        SessionSummary.from_json('{"schema_version": 2, "goal": "g", "risks": ["x"]}')
    assert (caught.value.found, caught.value.supported) == (2, 1)
    assert caught.value.payload == "SessionSummary"


def test_validate_schema_version_catches_unvalidated_objects() -> None:
    summary = SessionSummary.model_construct(schema_version=3, goal="g")
    with pytest.raises(UnsupportedSchemaVersion):
        summary.validate_schema_version()


def test_schema_version_zero_is_invalid() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        SessionSummary.from_json('{"schema_version": 0, "goal": "g"}')


@pytest.mark.parametrize(
    ("payload", "supported"),
    [(TaskResult, TASK_RESULT_SCHEMA_VERSION), (SessionSummary, SESSION_SUMMARY_SCHEMA_VERSION)],
)
def test_the_exported_version_is_the_one_written_and_the_newest_read(
    payload: type[TaskResult] | type[SessionSummary], supported: int
) -> None:
    fields = {"success": True} if payload is TaskResult else {"goal": "g"}
    written = json.loads(payload.model_validate(fields).to_json())
    assert written["schema_version"] == supported
    with pytest.raises(UnsupportedSchemaVersion):
        payload.model_validate({**fields, "schema_version": supported + 1})
