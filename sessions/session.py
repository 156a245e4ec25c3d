"""What the store hands out: a loaded `Session`, and `SessionInfo` rows of a listing."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bus import Message, SessionKey
from sessions.meta import SessionMeta, first_title


@dataclass(slots=True)
class Session:
    """One conversation: its meta line and the messages of its live file, oldest first.

    After compaction the first message is a system summary naming the archive file that holds
    the older ones (see `sessions.compaction`).
    """

    key: SessionKey
    meta: SessionMeta
    messages: list[Message] = field(default_factory=list)

    @classmethod
    def new(cls, key: SessionKey) -> Session:
        return cls(key, SessionMeta.new(key))

    @classmethod
    def forked(
        cls, child: SessionKey, parent: SessionKey, source: Session | None, copy_messages: int
    ) -> Session:
        """`child`, a new topic of `parent` (`source`, None if it has no session yet) that
        starts with its last `copy_messages` messages, titled by them as they were."""
        copied = [] if source is None or copy_messages <= 0 else source.messages[-copy_messages:]
        meta = SessionMeta.new(child, parent_key=parent, title=first_title(copied))
        return cls(child, meta, list(copied))

    @property
    def parent_key(self) -> SessionKey | None:
        parent = self.meta.parent_key
        return None if parent is None else SessionKey.parse(parent)

    def history(self, limit: int | None = None) -> list[Message]:
        """The last `limit` messages (all of them for None), as a new list."""
        if limit is None:
            return list(self.messages)
        if limit <= 0:
            return []
        return self.messages[-limit:]


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One row of `SessionStore.list()`, read from disk without parsing the messages.

    `message_count` counts the lines after the meta line (a compaction summary is one of them);
    `updated_at` is the later of the meta's stamp and the file's mtime, which every append moves.
    """

    key: SessionKey
    topic: str | None
    message_count: int
    size: int  # bytes of the live file
    updated_at: datetime
    path: Path | str  # the live file, or where a PostgreSQL store keeps it
    title: str | None = None
    parent_key: str | None = None
