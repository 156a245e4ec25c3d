"""`SessionStoreProtocol`: what the gateway needs of a session store, whatever keeps the data.

`sessions.store.SessionStore` (JSONL files) and `sessions.postgres.PostgresSessionStore`
implement it; `SessionManager`, the dispatcher, the chat commands, the API's history and the
`sessions` CLI use nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

from bus import Message, SessionKey
from sessions.session import Session, SessionInfo
from sessions.store import AppendReceipt


class SessionStoreProtocol(Protocol):
    @property
    def read_only(self) -> bool:
        """A store opened read-only refuses every change (a CLI reading a running daemon's)."""
        ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    async def append(self, key: SessionKey, message: Message) -> None: ...

    async def append_all(
        self, key: SessionKey, messages: Sequence[Message], *, lines: bytes | None = None
    ) -> AppendReceipt:
        """Store messages in order, as one write; returns once they are stored.
        `lines`, where the caller has them already: `Message.lines_of(messages)`.
        """
        ...

    async def sync(self) -> None:
        """Every append made so far is durable (the journal calls it before cutting its log)."""
        ...

    async def load(self, key: SessionKey) -> Session | None: ...

    async def rewrite(self, session: Session) -> None:
        """Replace the session's messages with `session`'s, atomically."""
        ...

    async def fork(self, parent: SessionKey, child: SessionKey, copy_messages: int) -> Session:
        """A new session `child` recording `parent`, starting with its last N messages."""
        ...

    async def archive(self, key: SessionKey) -> Path | str | None:
        """Set the session aside (history is kept); where it went, None if there was none."""
        ...

    async def list(self, base_key: str | None = None) -> list[SessionInfo]: ...

    def release(self, key: SessionKey) -> None:
        """The session left memory: free what is held for it (no I/O on the caller)."""
        ...
