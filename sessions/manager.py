"""`SessionManager`: the sessions in use, kept in memory (LRU), written through to the store.

Every message is on disk before the manager shows it in memory, so evicting a session costs no
I/O: it is simply dropped (and its file descriptor closed in the background). A session that
was never written is created lazily, in memory only; its file appears with its first message.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from bus import Message, SessionKey
from sessions.concurrency import KeyedLocks
from sessions.session import Session, SessionInfo
from sessions.store import SessionStoreProtocol


class SessionManager:
    def __init__(self, store: SessionStoreProtocol, max_open: int = 1000) -> None:
        if max_open < 1:
            raise ValueError("max_open must be at least 1")
        self.store = store
        self.max_open = max_open
        self._cache: OrderedDict[SessionKey, Session] = OrderedDict()
        self._loading: KeyedLocks[SessionKey] = KeyedLocks()

    def __len__(self) -> int:
        """How many sessions are loaded in memory."""
        return len(self._cache)

    def __contains__(self, key: SessionKey) -> bool:
        return key in self._cache

    async def get(self, key: SessionKey) -> Session:
        """The session, from memory, else from disk, else a new empty one (not yet on disk)."""
        return self._cached(key) or await self._load(key)

    async def _load(self, key: SessionKey) -> Session:
        async with self._loading.hold(key):
            session = self._cached(key)
            if session is None:
                session = await self.store.load(key) or Session.new(key)
                self._remember(session)
        return session

    # The store protocol's two writes, with its signatures: a caller writes to the manager as it
    # would to the store, and the manager adds only its memory.
    async def append(self, key: SessionKey, message: Message) -> None:
        await self.append_all(key, [message])

    async def append_all(
        self, key: SessionKey, messages: Sequence[Message], *, lines: bytes | None = None
    ) -> None:
        """Store messages durably, then show them in memory.
        `lines`, where the caller has them already: `Message.lines_of(messages)`.
        """
        # `get` without its coroutine when the session is in memory (every turn but a chat's
        # first): the same lookup, one call and one coroutine fewer.
        session = self._cached(key) or await self._load(key)
        try:
            receipt = await self.store.append_all(key, messages, lines=lines)
        except BaseException:
            # Cancelled or failed: whether the line reached the disk is unknown here, so the
            # next reader reloads the session from disk rather than trust memory.
            self._forget(session)
            raise
        if receipt.compacted:
            # The file now starts with a summary of what moved to the archive: reload lazily.
            self._forget(session)
            return
        if self._cache.get(key) is not session:
            return  # evicted meanwhile; whoever reloads it reads these lines from disk
        session.appended(messages)

    async def history(self, key: SessionKey, limit: int | None = None) -> list[Message]:
        """The last `limit` messages (all for None)."""
        session = self._cached(key) or await self._load(key)  # no coroutine when cached
        return session.history(limit)

    async def fork(self, parent: SessionKey, child: SessionKey, copy_messages: int) -> Session:
        session = await self.store.fork(parent, child, copy_messages)
        self._remember(session)
        return session

    async def reset(self, key: SessionKey) -> None:
        """Start the session over; its old file is archived, never deleted."""
        await self.store.archive(key)
        self._cache.pop(key, None)
        self._remember(Session.new(key))

    async def delete(self, key: SessionKey) -> None:
        """Remove the session from use; its file is archived, never deleted."""
        await self.store.archive(key)
        self._cache.pop(key, None)

    async def list_sessions(self, base_key: str | None = None) -> list[SessionInfo]:
        return await self.store.list(base_key)

    def evict_chat(self, base_key: str) -> None:
        """Drop every session of a chat (all its topics) from memory: the next read loads them
        from the store. A cluster worker does so before each message, since the chat's last
        turns may have run on another worker."""
        for key in [key for key in self._cache if key.base_key() == base_key]:
            self.evict(key)

    def evict(self, key: SessionKey) -> bool:
        """Drop a session from memory (it is all on disk); True if it was loaded."""
        if self._cache.pop(key, None) is None:
            return False
        self.store.release(key)
        return True

    def _cached(self, key: SessionKey) -> Session | None:
        session = self._cache.get(key)
        if session is not None:
            self._cache.move_to_end(key)
        return session

    def _remember(self, session: Session) -> None:
        self._cache[session.key] = session
        self._cache.move_to_end(session.key)
        while len(self._cache) > self.max_open:
            oldest, _ = self._cache.popitem(last=False)
            self.store.release(oldest)

    def _forget(self, session: Session) -> None:
        if self._cache.get(session.key) is session:
            del self._cache[session.key]
