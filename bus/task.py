"""Tasks: the unit of an agent's work, with a state machine that only moves along legal edges.

    Pending ──> InProgress ──> Completed
                  │   ▲  └───> Failed
                  ▼   │          ▲
                 Blocked ────────┘

Only InProgress reaches Completed, so every completed task was worked on. A status is a tagged
union: each state carries exactly its own data (who works on it, why it is blocked, what
failed), so "pending with an agent" or "completed with an error" cannot be written down.

Agents coordinate work on tasks with five messages (`AgentMessage`): hand a task over, report
its new status, report its result, ask for more context, answer with context. Each is a variant
of a tagged union (`type` on the wire); `AgentMessage` wraps whichever one it is, so a payload
parses without knowing its variant in advance, and `task_id()` names the task for every variant.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal, NewType, Self

import uuid_utils
from pydantic import ConfigDict, Field, RootModel

from bus.errors import InvalidStateTransition
from bus.message import Message, TaggedModel, TokenUsage, VersionedModel, WireModel, utc_now

TASK_RESULT_SCHEMA_VERSION = 1

TaskId = NewType("TaskId", uuid.UUID)
AgentId = NewType("AgentId", str)


def new_task_id() -> TaskId:
    """A fresh UUIDv7: its leading 48 bits are the creation time, so ids sort by age."""
    return TaskId(uuid.UUID(int=uuid_utils.uuid7().int))


# One class per state: each carries exactly its own data.
class PendingStatus(TaggedModel):
    type: Literal["pending"] = "pending"


class InProgressStatus(TaggedModel):
    type: Literal["in_progress"] = "in_progress"
    agent_id: AgentId


class BlockedStatus(TaggedModel):
    type: Literal["blocked"] = "blocked"
    reason: str


class CompletedStatus(TaggedModel):
    type: Literal["completed"] = "completed"


class FailedStatus(TaggedModel):
    type: Literal["failed"] = "failed"
    error: str


TaskStatus = Annotated[
    PendingStatus | InProgressStatus | BlockedStatus | CompletedStatus | FailedStatus,
    Field(discriminator="type"),
]

#: The state diagram: for each state, the states a task may move to next.
TASK_TRANSITIONS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "pending": frozenset({"in_progress"}),
        "in_progress": frozenset({"blocked", "completed", "failed"}),
        "blocked": frozenset({"in_progress", "failed"}),
        "completed": frozenset(),
        "failed": frozenset(),
    }
)


def can_transition(current: TaskStatus, new: TaskStatus) -> bool:
    return new.type in TASK_TRANSITIONS[current.type]


# One class per kind of task, each with its own payload.
class PlanKind(TaggedModel):
    type: Literal["plan"] = "plan"
    goal: str


class CodeKind(TaggedModel):
    type: Literal["code"] = "code"
    instruction: str
    files: list[Path] = Field(default_factory=list)


class ReviewKind(TaggedModel):
    type: Literal["review"] = "review"
    diff: str


class TestKind(TaggedModel):
    __test__: ClassVar[bool] = False  # not a pytest test class, whatever its name says

    type: Literal["test"] = "test"
    command: str


class CustomKind(TaggedModel):
    """The extension point: a named kind with free-form JSON parameters."""

    type: Literal["custom"] = "custom"
    name: str
    params: Any = None


TaskKind = Annotated[
    PlanKind | CodeKind | ReviewKind | TestKind | CustomKind,
    Field(discriminator="type"),
]


class GitState(WireModel):
    branch: str
    dirty: bool = False
    head: str | None = None


class EpisodeRef(WireModel):
    """A pointer into long-term (episodic) memory that was found relevant to the task."""

    episode_id: str
    summary: str = ""
    relevance: float | None = None


class TaskContext(WireModel):
    """The world a task runs in: where, on what, and what it remembers.

    `working_memory` holds the recent turns of the conversation (short-term memory);
    `episodic_refs` point at relevant past episodes (long-term memory).
    """

    working_dir: Path
    git_state: GitState | None = None
    working_memory: list[Message] = Field(default_factory=list)
    episodic_refs: list[EpisodeRef] = Field(default_factory=list)
    files_in_scope: list[Path] = Field(default_factory=list)


class TaskResult(VersionedModel):
    """What a task produced; a durable ABI, read across processes and from disk."""

    SUPPORTED_SCHEMA_VERSION: ClassVar[int] = TASK_RESULT_SCHEMA_VERSION
    PAYLOAD_NAME: ClassVar[str] = "TaskResult"

    success: bool
    output: str = ""
    files_modified: list[Path] = Field(default_factory=list)
    files_to_send: list[Path] = Field(default_factory=list)
    subtasks: list[TaskId] = Field(default_factory=list)
    token_usage: TokenUsage = Field(default_factory=TokenUsage)


class Task(WireModel):
    """One unit of work. Immutable: `transition` returns the task in its new state."""

    id: TaskId = Field(default_factory=new_task_id)
    parent_id: TaskId | None = None
    status: TaskStatus = Field(default_factory=PendingStatus)
    kind: TaskKind
    context: TaskContext
    result: TaskResult | None = None
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)

    def transition(self, new_status: TaskStatus, *, result: TaskResult | None = None) -> Task:
        """This task moved to `new_status` (and given `result`), with `updated_at` now.

        Raises `InvalidStateTransition` for an edge the state diagram does not have; the task
        itself never changes.
        """
        if not can_transition(self.status, new_status):
            allowed = tuple(sorted(TASK_TRANSITIONS[self.status.type]))
            raise InvalidStateTransition(self.status.type, new_status.type, allowed)
        update: dict[str, Any] = {"status": new_status, "updated_at": utc_now()}
        if result is not None:
            update["result"] = result
        return self.model_copy(update=update)

    def subtask(self, kind: TaskKind, context: TaskContext | None = None) -> Task:
        """A new pending task under this one, in this task's context unless given another."""
        return Task(parent_id=self.id, kind=kind, context=context or self.context)

    @property
    def is_finished(self) -> bool:
        return not TASK_TRANSITIONS[self.status.type]


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
