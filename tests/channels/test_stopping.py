"""Racing work against a stop event: the result, None once stopped, errors passed on."""

from __future__ import annotations

import asyncio

import pytest

from channels.stopping import sleep_unless_set, until_stopped


async def test_the_result_of_work_that_finishes_first() -> None:
    async def work() -> str:
        return "done"

    assert await until_stopped(work(), asyncio.Event(), name="test-work") == "done"


async def test_none_once_stopped_and_the_work_is_cancelled() -> None:
    stopping = asyncio.Event()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def work() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    racing = asyncio.create_task(until_stopped(work(), stopping, name="test-work"))
    await started.wait()
    stopping.set()
    assert await racing is None
    assert cancelled.is_set()


async def test_an_error_of_the_work_is_raised() -> None:
    async def work() -> None:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        await until_stopped(work(), asyncio.Event(), name="test-work")


async def test_work_that_comes_after_the_stop_never_starts() -> None:
    stopping = asyncio.Event()
    stopping.set()
    ran = False

    async def work() -> str:
        nonlocal ran
        ran = True
        return "ran"

    assert await until_stopped(work(), stopping, name="test-work") is None
    assert not ran


async def test_a_sleep_ends_early_when_the_event_is_set() -> None:
    event = asyncio.Event()
    sleeping = asyncio.Event()

    async def sleep_forever(_delay_s: float) -> None:
        sleeping.set()
        await asyncio.Event().wait()

    waiting = asyncio.create_task(sleep_unless_set(event, 3600.0, sleep_forever))
    await sleeping.wait()
    event.set()
    assert await waiting is True


async def test_a_sleep_that_ends_reports_the_event_unset() -> None:
    slept: list[float] = []

    async def record(delay_s: float) -> None:
        slept.append(delay_s)

    assert await sleep_unless_set(asyncio.Event(), 5.0, record) is False
    assert slept == [5.0]


async def test_cancelling_the_caller_cancels_the_work() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    racing = asyncio.create_task(until_stopped(work(), asyncio.Event(), name="test-work"))
    await started.wait()
    racing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await racing
    assert cancelled.is_set()
