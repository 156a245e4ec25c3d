"""The connection's blocking-call thread: results, errors, cancellation, a daemon thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from channels.email.imap import BlockingWorker


async def test_calls_run_in_order_in_one_daemon_thread() -> None:
    worker = BlockingWorker("test-worker")
    names = await asyncio.gather(
        *(worker.run(lambda: threading.current_thread().name) for _ in range(3))
    )
    assert names == ["test-worker"] * 3
    assert worker._thread.daemon
    worker.close()


async def test_an_error_reaches_the_caller() -> None:
    worker = BlockingWorker("test-worker")

    def fail() -> None:
        raise OSError("connection reset")

    with pytest.raises(OSError, match="connection reset"):
        await worker.run(fail)
    assert await worker.run(lambda: 42) == 42
    worker.close()
    with pytest.raises(RuntimeError, match="closed"):
        await worker.run(lambda: 1)


async def test_a_cancelled_wait_returns_at_once_and_the_thread_goes_on() -> None:
    worker = BlockingWorker("test-worker")
    started = threading.Event()
    release = threading.Event()
    finished = threading.Event()

    def blocked() -> None:
        started.set()
        release.wait(10)
        finished.set()

    waiting = asyncio.create_task(worker.run(blocked))
    assert await asyncio.to_thread(started.wait, 10)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    assert await asyncio.to_thread(finished.wait, 10)
    worker.close()
