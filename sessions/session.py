"""What the store hands out: a loaded `Session`, and `SessionInfo` rows of a listing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bus import Message, SessionKey
from bus.message import utc_now
from sessions.meta import SessionMeta, first_title


class Session:
    """One conversation: its meta line and the messages of its live file, oldest first.

    After compaction the first message is a system summary naming the archive file that holds
    the older ones (see `sessions.operations`).
    """

    __slots__ = ("_meta", "_title", "_touched_at", "key", "messages")

    def __init__(
        self, key: SessionKey, meta: SessionMeta, messages: list[Message] | None = None
    ) -> None:
        self.key = key
        self._meta = meta
        #: When messages were last appended, and the title the first titling one gave a meta
        #: without one, not yet stamped on `_meta` (see `meta`).
        self._touched_at: datetime | None = None
        self._title: str | None = None
        self.messages: list[Message] = [] if messages is None else messages

    @property
    def meta(self) -> SessionMeta:
        # A turn appends every time and hardly anyone reads the meta of a session in memory,
        # so an append notes its time (and a chat's first turn its title) and the stamped
        # copy is made here, when it is read.
        if self._touched_at is not None:
            self._meta = self._meta.touched(self._touched_at, title=self._title)
            self._touched_at = self._title = None
        return self._meta

    @meta.setter
    def meta(self, meta: SessionMeta) -> None:
        self._meta, self._touched_at, self._title = meta, None, None

    def appended(self, messages: Sequence[Message], now: datetime | None = None) -> None:
        """Show `messages`, just stored: touched now, and titled by them if it had no title
        (`SessionMeta.appended`)."""
        if self._meta.title is None and self._title is None:
            self._title = first_title(messages)
        self._touched_at = now or utc_now()
        self.messages.extend(messages)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Session):
            return NotImplemented
        return (self.key, self.meta, self.messages) == (other.key, other.meta, other.messages)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it was

    def __repr__(self) -> str:
        return f"Session(key={self.key!r}, meta={self.meta!r}, messages={self.messages!r})"

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
