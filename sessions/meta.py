"""`SessionMeta`: the first line of every session file."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from pydantic import Field, ValidationError

from bus import Message, MessageRole, SessionKey, WireModel
from bus.message import utc_now
from sessions.errors import UnsupportedSessionSchema

#: The file format this build writes and the newest it reads.
CURRENT_SCHEMA_VERSION: Final = 1
TITLE_MAX_CHARS: Final = 50


def derive_title(content: str) -> str | None:
    """Octos' rule: the first user message, trimmed, its first 50 characters."""
    title = content.strip()[:TITLE_MAX_CHARS].strip()
    return title or None


def title_of(message: Message) -> str | None:
    """The title `message` gives a session that has none: only a user's words title it."""
    return derive_title(message.content) if message.role is MessageRole.USER else None


def first_title(messages: Iterable[Message]) -> str | None:
    """The title the first titling one of `messages` gives (see `title_of`), if any does."""
    return next((title for title in map(title_of, messages) if title is not None), None)


class SessionMeta(WireModel):
    """Who a session file belongs to and where it came from.

    Unlike other wire types, `schema_version` and both timestamps are always written (a reader
    must never have to guess the format); `title_manual` only when true, as octos does.
    """

    # A file from before schema versions existed is version 1.
    schema_version: int = 1
    session_key: str
    parent_key: str | None = None
    topic: str | None = None
    summary: str | None = None
    title: str | None = None
    title_manual: bool = False
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)

    @classmethod
    def new(
        cls,
        key: SessionKey,
        *,
        parent_key: SessionKey | None = None,
        now: datetime | None = None,
        title: str | None = None,
    ) -> SessionMeta:
        stamp = now or utc_now()
        return cls(
            schema_version=CURRENT_SCHEMA_VERSION,
            session_key=str(key),
            parent_key=None if parent_key is None else str(parent_key),
            topic=key.topic(),
            title=title,
            created_at=stamp,
            updated_at=stamp,
        )

    def _dump_options(self) -> dict[str, Any]:
        return {"exclude_none": True, "exclude": None if self.title_manual else {"title_manual"}}

    def to_json(self) -> str:
        return self.model_dump_json(**self._dump_options())

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", **self._dump_options())

    def to_line(self) -> bytes:
        # Straight to bytes, as `Message.to_line`: `model_dump_json` would only decode them.
        return self.__pydantic_serializer__.to_json(self, **self._dump_options()) + b"\n"

    def touched(self, now: datetime | None = None, *, title: str | None = None) -> SessionMeta:
        """This meta stamped `now`, and titled `title` if given and it has no title yet."""
        update: dict[str, Any] = {"updated_at": now or utc_now()}
        if title is not None and self.title is None:
            update["title"] = title
        return self.model_copy(update=update)

    def appended(self, messages: Iterable[Message], now: datetime | None = None) -> SessionMeta:
        """This meta once `messages` were appended: touched now, and titled by them (see
        `first_title`) if it had no title; one copy, as a turn appends every time."""
        return self.touched(now, title=None if self.title is not None else first_title(messages))

    def current_schema(self) -> SessionMeta:
        return self.model_copy(update={"schema_version": CURRENT_SCHEMA_VERSION})


def read_meta_line(raw: bytes, path: Path) -> SessionMeta | None:
    """The meta of a first line, None if it is not one; a newer schema is refused."""
    try:
        meta = SessionMeta.model_validate_json(raw)
    except ValidationError:
        meta = None
    version = meta.schema_version if meta is not None else _schema_version_of(raw)
    if version is not None and version > CURRENT_SCHEMA_VERSION:
        raise UnsupportedSessionSchema(path, version, CURRENT_SCHEMA_VERSION)
    return meta


def _schema_version_of(raw: bytes) -> int | None:
    # A newer meta may fail our validation; its version must still be reported, not "corrupt".
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if isinstance(data, dict):
        version = data.get("schema_version")
        if isinstance(version, int) and "session_key" in data:
            return version
    return None
