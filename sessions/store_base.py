"""`StoreBase`: what both session stores (JSONL files, PostgreSQL) share, written once.

`async with store:` is `open()`, then `close()` on the way out; `rewrite` and `fork` are
whole-session writes, which each store makes atomic in its own way (`_write_whole`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self

from bus import SessionKey
from sessions.session import Session


class StoreBase(ABC):
    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def load(self, key: SessionKey) -> Session | None: ...

    @abstractmethod
    async def _write_whole(self, session: Session, *, create_only: bool) -> None:
        """Store `session` in place of what the store holds for its key, atomically;
        `create_only` refuses (SessionExists) a key that has history already."""

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def rewrite(self, session: Session) -> None:
        """Replace the session's messages with `session`'s, atomically."""
        await self._write_whole(session, create_only=False)

    async def fork(self, parent: SessionKey, child: SessionKey, copy_messages: int) -> Session:
        """A new session `child` that records `parent` and starts with its last N messages."""
        session = Session.forked(child, parent, await self.load(parent), copy_messages)
        await self._write_whole(session, create_only=True)
        return session
