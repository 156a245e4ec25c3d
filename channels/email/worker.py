"""A daemon thread that runs one connection's blocking calls, one at a time, for the event loop.

Why not `asyncio.to_thread` or a `ThreadPoolExecutor`: the shared default pool has a handful of
threads, and an IMAP IDLE holds one for minutes; an executor of our own joins its threads when
the interpreter exits, so a call stuck in a connect to an unreachable server would hold up the
daemon's exit for the whole socket timeout. This thread is a daemon thread: once the event loop
has let go of it (the call was cancelled, the connection closed), nothing waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Call = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return  # the caller stopped waiting; the outcome is nobody's any more
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class BlockingWorker:
    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._closed = False

    async def run(self, call: Callable[[], T]) -> T:
        """`call()` in the worker thread; cancelling the wait does not stop the call."""
        if self._closed:
            raise RuntimeError("the worker is closed")
        if not self._thread.is_alive():
            self._thread.start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((call, future, loop))
        return await future

    def close(self) -> None:
        """Let the thread end after the call it is in (if any); idempotent."""
        if not self._closed:
            self._closed = True
            self._calls.put(None)

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            call, future, loop = item
            result: Any = None
            error: BaseException | None = None
            try:
                result = call()
            except BaseException as exc:  # handed to the awaiting coroutine, not swallowed
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_settle, future, result, error)
