"""AgentMessage: how agents coordinate work on tasks.

Five messages cover it: hand a task over, report its new status, report its result, ask for
more context, answer with context. Each is a variant of a tagged union (`type` on the wire);
`AgentMessage` wraps whichever one it is, so a payload parses without knowing its variant in
advance, and `task_id()` names the task for every variant.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import ConfigDict, Field, RootModel

from bus.message import Message
from bus.task import Task, TaskId, TaskResult, TaskStatus
from bus.wire import TaggedModel


class TaskAssign(TaggedModel):
    type: Literal["task_assign"] = "task_assign"
    task: Task

    @property
    def task_id(self) -> TaskId:
        return self.task.id


# The variants below share their form (`type`, `task_id`, the payload): octos-core's wire types.
class TaskUpdate(TaggedModel):
    type: Literal["task_update"] = "task_update"
    task_id: TaskId
    status: TaskStatus


class TaskComplete(TaggedModel):
    type: Literal["task_complete"] = "task_complete"
    task_id: TaskId
    result: TaskResult


class ContextRequest(TaggedModel):
    type: Literal["context_request"] = "context_request"
    task_id: TaskId
    query: str


class ContextResponse(TaggedModel):
    type: Literal["context_response"] = "context_response"
    task_id: TaskId
    context: list[Message] = Field(default_factory=list)


AgentMessageVariant = Annotated[
    TaskAssign | TaskUpdate | TaskComplete | ContextRequest | ContextResponse,
    Field(discriminator="type"),
]


class AgentMessage(RootModel[AgentMessageVariant]):
    """Any agent coordination message; the variant itself is `root`."""

    model_config = ConfigDict(frozen=True)

    def task_id(self) -> TaskId:
        """The task this message is about, whichever variant it is."""
        return self.root.task_id

    def to_json(self) -> str:
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        return cls.model_validate_json(text)
