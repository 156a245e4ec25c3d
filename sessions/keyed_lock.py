"""Per-key asyncio locks that exist only while someone holds or waits for them.

A plain `dict[key, Lock]` grows with every session ever seen; here an entry is dropped as soon
as its last user leaves, so memory follows the number of sessions in use, not seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class KeyedLocks(Generic[K]):
    def __init__(self) -> None:
        self._entries: dict[K, _Entry] = {}

    def hold(self, key: K) -> _Holding[K]:
        """`async with locks.hold(key):` one holder per key at a time, first come first served."""
        return _Holding(self, key)

    def in_use(self, key: K) -> bool:
        """Whether anyone holds or waits for `key`."""
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _enter(self, key: K) -> _Entry:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
        entry.users += 1
        return entry

    def _leave(self, key: K, entry: _Entry) -> None:
        entry.users -= 1
        if entry.users == 0:
            del self._entries[key]


class _Holding(Generic[K]):
    __slots__ = ("_entry", "_key", "_locks")

    def __init__(self, locks: KeyedLocks[K], key: K) -> None:
        self._locks = locks
        self._key = key
        self._entry: _Entry | None = None

    async def __aenter__(self) -> None:
        entry = self._locks._enter(self._key)
        try:
            await entry.lock.acquire()
        except BaseException:
            self._locks._leave(self._key, entry)
            raise
        self._entry = entry

    async def __aexit__(self, *exc_info: object) -> None:
        entry = self._entry
        assert entry is not None
        self._entry = None
        entry.lock.release()
        self._locks._leave(self._key, entry)
