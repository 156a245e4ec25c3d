"""AgentMessage: the agent coordination protocol, tagged on the wire."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bus import (
    AgentId,
    AgentMessage,
    BlockedStatus,
    ContextRequest,
    ContextResponse,
    InProgressStatus,
    Message,
    PlanKind,
    Task,
    TaskAssign,
    TaskComplete,
    TaskContext,
    TaskResult,
    TaskUpdate,
    new_task_id,
)

TASK = Task(kind=PlanKind(goal="g"), context=TaskContext(working_dir=Path("/w")))
OTHER_ID = new_task_id()

MESSAGES = [
    TaskAssign(task=TASK),
    TaskUpdate(task_id=OTHER_ID, status=BlockedStatus(reason="waiting")),
    TaskComplete(task_id=OTHER_ID, result=TaskResult(success=True, output="ok")),
    ContextRequest(task_id=OTHER_ID, query="which files changed?"),
    ContextResponse(task_id=OTHER_ID, context=[Message.user("a"), Message.assistant("b")]),
]


@pytest.mark.parametrize("variant", MESSAGES, ids=lambda m: m.type)
def test_every_variant_round_trips_with_its_tag(
    variant: TaskAssign | TaskUpdate | TaskComplete | ContextRequest | ContextResponse,
) -> None:
    message = AgentMessage(variant)
    text = message.to_json()
    assert json.loads(text)["type"] == variant.type
    restored = AgentMessage.from_json(text)
    assert restored == message
    assert type(restored.root) is type(variant)


@pytest.mark.parametrize("variant", MESSAGES, ids=lambda m: m.type)
def test_task_id_for_every_variant(
    variant: TaskAssign | TaskUpdate | TaskComplete | ContextRequest | ContextResponse,
) -> None:
    expected = TASK.id if isinstance(variant, TaskAssign) else OTHER_ID
    assert AgentMessage(variant).task_id() == expected


def test_update_carries_a_tagged_status() -> None:
    update = TaskUpdate.model_validate(
        {"task_id": str(OTHER_ID), "status": {"type": "in_progress", "agent_id": "a"}}
    )
    assert update.status == InProgressStatus(agent_id=AgentId("a"))
    message = AgentMessage(update)
    data = json.loads(message.to_json())
    assert data["status"] == {"type": "in_progress", "agent_id": "a"}
    assert AgentMessage.from_json(message.to_json()).root == update


def test_context_response_without_context_reads_empty() -> None:
    text = json.dumps({"type": "context_response", "task_id": str(OTHER_ID)})
    restored = AgentMessage.from_json(text).root
    assert isinstance(restored, ContextResponse)
    assert restored.context == []


def test_unknown_variant_is_refused() -> None:
    with pytest.raises(ValidationError):
        AgentMessage.from_json(json.dumps({"type": "task_cancel", "task_id": str(OTHER_ID)}))
