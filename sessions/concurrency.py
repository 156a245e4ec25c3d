"""How a store's operations run side by side: per-key locks, a count of running operations,
and blocking file work in a thread.

- `KeyedLocks`: per-key asyncio locks that exist only while someone holds or waits for them. A
  plain `dict[key, Lock]` grows with every session ever seen; here an entry is dropped as soon
  as its last user leaves, so memory follows the number of sessions in use, not seen.
- `RunningOperations`: how many of a store's operations run, so its `close` can wait for them.
- `to_completion`: blocking file work in a thread, seen through to its end even when its caller
  is cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
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


class RunningOperations:
    """`with operations:` around each operation; `await operations.idle()` returns once none
    runs. Entering and leaving never suspend."""

    __slots__ = ("_count", "_idle")

    def __init__(self) -> None:
        self._count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def __enter__(self) -> None:
        self._count += 1
        self._idle.clear()

    def __exit__(self, *exc_info: object) -> None:
        self._count -= 1
        if self._count == 0:
            self._idle.set()

    async def idle(self) -> None:
        await self._idle.wait()


T = TypeVar("T")


async def to_completion(
    work: Callable[[], T], on_abandoned: Callable[[T], object] | None = None
) -> T:
    """Run blocking file work in a thread and see it finish, even if the caller is cancelled.

    A thread cannot be stopped halfway, and the caller's lock on the session must outlive the
    work, or the next operation would race it. The cancellation is re-raised once the work is
    done; `on_abandoned` receives a result nobody else will (a descriptor to keep track of).
    """
    task = asyncio.create_task(asyncio.to_thread(work), name="session-file-work")
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            try:
                await asyncio.wait([task])
            except asyncio.CancelledError:
                continue  # already leaving with a CancelledError: raised below
        if on_abandoned is not None and not task.cancelled() and task.exception() is None:
            on_abandoned(task.result())
        raise
