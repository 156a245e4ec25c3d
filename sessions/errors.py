"""Typed errors of the session layer: each says what went wrong and what to do about it.

One class per failure, each keeping its facts as attributes (for callers) and saying them in its
message (for the operator).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar


class SessionError(Exception):
    """Base of every error the session layer raises on purpose."""


class UnsupportedSessionSchema(SessionError):
    """A session file written by a newer build: reading it could lose what we do not know."""

    def __init__(self, path: Path | str, found: int, supported: int) -> None:
        self.path = path
        self.found = found
        self.supported = supported
        super().__init__(
            f"session file {path} has schema_version {found}; this build reads "
            f"schema_version {supported} or older. Upgrade octos-gateway to open it "
            "(the file was left untouched)."
        )


class SessionKeyCollision(SessionError):
    """Two keys whose cut file names hash alike: the second is refused, never merged."""

    def __init__(self, path: Path, requested: str, stored: str) -> None:
        self.path = path
        self.requested = requested
        self.stored = stored
        super().__init__(
            f"session file {path} belongs to key {stored!r}, not {requested!r} (their long "
            "names were cut to the same hash); the file was left untouched. Use a shorter key."
        )


class SessionChangeRefused(SessionError):
    """A change to session `key` (its file or row at `path`) refused, so its history is kept;
    each kind says why, and what to do, in its `explanation`."""

    explanation: ClassVar[str]

    def __init__(self, key: str, path: Path | str) -> None:
        self.key = key
        self.path = path
        super().__init__(self.explanation.format(key=repr(key), path=path))


class SessionExists(SessionChangeRefused):
    """A fork or create would overwrite a session that already has history."""

    explanation = "session {key} exists already ({path}); switch to it, or archive it first"


class EmptyRewriteRefused(SessionChangeRefused):
    """A rewrite would replace a session that has messages with an empty one."""

    explanation = (
        "refusing to replace session {key} ({path}) with an empty one; "
        "archive it instead (reset/delete do), so its history is kept"
    )


class SessionWriteError(SessionError):
    """The disk refused a write; the message was not stored."""

    def __init__(self, path: Path, cause: OSError) -> None:
        self.path = path
        self.cause = cause
        super().__init__(
            f"could not write session file {path}: {cause.strerror or cause}; "
            "check free disk space and permissions of the data directory"
        )


class SessionStoreClosed(SessionError):
    """The store was used outside its `async with` block."""

    def __init__(self) -> None:
        super().__init__("the session store is not open; use `async with SessionStore(...)`")


class InvalidTopicName(SessionError, ValueError):
    """A topic name a user typed that cannot name a session."""
