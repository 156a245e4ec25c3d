"""Identity types that a type checker keeps apart.

A client message id (the client's optimistic-UI / idempotency token), a thread id (the render
grouping key) and a turn id (the server's protocol identity) are all strings on the wire, but
mixing them up silently files replies under the wrong bubble, so each is its own type.
"""

from __future__ import annotations

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
