"""SessionSummary: a typed compaction of a conversation, kept field by field.

Compacting a long session into one paragraph of prose loses what a later compaction needs to
update: the goal, the constraints, what is done and in progress, the decisions (and which of
them no longer hold), the files touched, the next steps. Kept apart, each can be revised on the
next compaction. It is durable (written into session files), so it carries a schema version and
a newer one is refused with `UnsupportedSchemaVersion` rather than read with fields missing.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from bus.message import WireModel
from bus.wire import VersionedModel

SESSION_SUMMARY_SCHEMA_VERSION = 1


class DecisionRecord(WireModel):
    """A decision taken in the conversation; `stale` once later turns overrode it."""

    decision: str
    rationale: str | None = None
    stale: bool = False


class FileRecord(WireModel):
    """A file the conversation touched, and what about it matters."""

    path: str
    note: str | None = None


class SessionSummary(VersionedModel):
    SUPPORTED_SCHEMA_VERSION: ClassVar[int] = SESSION_SUMMARY_SCHEMA_VERSION
    PAYLOAD_NAME: ClassVar[str] = "SessionSummary"

    goal: str
    constraints: list[str] = Field(default_factory=list)
    progress_done: list[str] = Field(default_factory=list)
    progress_in_progress: list[str] = Field(default_factory=list)
    decisions: list[DecisionRecord] = Field(default_factory=list)
    files: list[FileRecord] = Field(default_factory=list)
    next_steps: list[str] = Field(default_factory=list)

    def active_decisions(self) -> list[DecisionRecord]:
        """The decisions that still hold."""
        return [decision for decision in self.decisions if not decision.stale]
