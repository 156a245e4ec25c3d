"""Identity types that a type checker keeps apart.

A client message id (the client's optimistic-UI / idempotency token), a thread id (the render
grouping key) and a turn id (the server's protocol identity) are all strings on the wire, but
mixing them up silently files replies under the wrong bubble, so each is its own type.
"""

from __future__ import annotations

import uuid
from typing import NewType

import uuid_utils

ClientMessageId = NewType("ClientMessageId", str)
ThreadId = NewType("ThreadId", str)
TurnId = NewType("TurnId", str)


def thread_rooted_at(cmid: ClientMessageId) -> ThreadId:
    """The thread that a user message starts: rooted at its client message id."""
    return ThreadId(str(cmid))


def new_turn_id() -> TurnId:
    """A fresh, time-ordered turn id (UUIDv7).

    uuid-utils makes it in Rust from a generator seeded once: no system call per id (an
    `os.urandom` per id gives the event loop's GIL away on every turn)."""
    return TurnId(str(uuid_utils.uuid7()))


def turn_made_at(turn_id: str) -> float | None:
    """When a turn id was made, in seconds since the epoch, read from its UUIDv7 timestamp;
    None for an id of another form."""
    try:
        value = uuid.UUID(turn_id)
    except ValueError:
        return None
    if value.version != 7:
        return None
    return (value.int >> 80) / 1000
