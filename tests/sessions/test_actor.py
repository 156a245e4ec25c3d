"""SessionActors: per-key order, bounded concurrency, failures, cancellation, idle stop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from structlog.testing import capture_logs

from sessions import SessionActors, SessionActorsStopped, WorkItemCancelled
from tests.sessions.conftest import chat_key

WAIT_S = 5.0
GRACE_S = 0.5  # a failing test must not wait out the default grace on its way out


async def _yield_to_others() -> None:
    resumed = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(resumed.set_result, None)
    await resumed


async def _wait_until(condition: asyncio.Condition, predicate: object) -> None:
    assert callable(predicate)
    async with condition:
        await asyncio.wait_for(condition.wait_for(predicate), WAIT_S)


async def test_one_keys_items_run_strictly_in_submission_order() -> None:
    done: list[int] = []

    def work(index: int) -> Callable[[], Awaitable[int]]:
        async def run() -> int:
            await _yield_to_others()  # an unordered runner would interleave here
            done.append(index)
            return index

        return run

    async with SessionActors(max_concurrent=4, shutdown_grace_s=GRACE_S) as actors:
        results = await asyncio.gather(*(actors.submit(chat_key(1), work(i)) for i in range(50)))
    assert results == list(range(50))
    assert done == list(range(50))


async def test_different_keys_run_concurrently_up_to_max_concurrent() -> None:
    gate = asyncio.Event()
    changed = asyncio.Condition()
    running = 0
    most = 0

    async def turn() -> None:
        nonlocal running, most
        async with changed:
            running += 1
            most = max(most, running)
            changed.notify_all()
        await gate.wait()
        async with changed:
            running -= 1

    async with SessionActors(max_concurrent=3, shutdown_grace_s=GRACE_S) as actors:
        submitted = [asyncio.create_task(actors.submit(chat_key(i), turn)) for i in range(8)]
        await _wait_until(changed, lambda: running == 3)
        assert actors.running_count == 3
        assert actors.active_count == 8
        assert all(actors.busy(chat_key(i)) for i in range(8))
        gate.set()
        await asyncio.gather(*submitted)
    assert most == 3


async def test_a_blocked_session_does_not_hold_up_another() -> None:
    gate = asyncio.Event()
    async with SessionActors(max_concurrent=2, shutdown_grace_s=GRACE_S) as actors:
        blocked = asyncio.create_task(actors.submit(chat_key(1), gate.wait))

        async def quick() -> str:
            return "done"

        assert await asyncio.wait_for(actors.submit(chat_key(2), quick), WAIT_S) == "done"
        assert not blocked.done()
        gate.set()
        assert await blocked is True


async def test_a_failing_item_is_logged_reported_and_survived() -> None:
    async def broken() -> None:
        raise ValueError("the agent fell over")

    async def fine() -> str:
        return "still here"

    async with SessionActors(shutdown_grace_s=GRACE_S) as actors:
        with capture_logs() as logs, pytest.raises(ValueError, match="fell over"):
            await actors.submit(chat_key(1), broken)
        assert await actors.submit(chat_key(1), fine) == "still here"
    failures = [entry for entry in logs if entry["event"] == "session work item failed"]
    assert failures
    assert failures[0]["session"] == "_main:telegram:1"


async def test_cancelling_a_waiting_submitter_drops_its_item() -> None:
    gate = asyncio.Event()
    ran: list[str] = []

    async def record(name: str) -> None:
        ran.append(name)

    async with SessionActors(shutdown_grace_s=GRACE_S) as actors:
        first = asyncio.create_task(actors.submit(chat_key(1), gate.wait))
        second = asyncio.create_task(actors.submit(chat_key(1), lambda: record("second")))
        third = asyncio.create_task(actors.submit(chat_key(1), lambda: record("third")))
        asyncio.get_running_loop().call_soon(second.cancel)
        with pytest.raises(asyncio.CancelledError):
            await second
        gate.set()
        await first
        await third
    assert ran == ["third"]


async def test_cancelling_a_running_submitter_cancels_its_work() -> None:
    started, stopped = asyncio.Event(), asyncio.Event()

    async def endless() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    async def after() -> str:
        return "next turn"

    async with SessionActors(shutdown_grace_s=GRACE_S) as actors:
        turn = asyncio.create_task(actors.submit(chat_key(1), endless))
        await asyncio.wait_for(started.wait(), WAIT_S)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        await asyncio.wait_for(stopped.wait(), WAIT_S)
        assert await actors.submit(chat_key(1), after) == "next turn"


async def test_cancel_running_aborts_the_current_item() -> None:
    started = asyncio.Event()

    async def endless() -> None:
        started.set()
        await asyncio.Event().wait()

    async with SessionActors(shutdown_grace_s=GRACE_S) as actors:
        assert not actors.cancel_running(chat_key(1))
        turn = asyncio.create_task(actors.submit(chat_key(1), endless))
        await asyncio.wait_for(started.wait(), WAIT_S)
        assert actors.cancel_running(chat_key(1))
        with pytest.raises(WorkItemCancelled):
            await turn


async def test_an_idle_actor_stops_and_a_new_one_starts_on_demand() -> None:
    async def noop() -> int:
        return 1

    async with SessionActors(idle_timeout_s=0.05, shutdown_grace_s=GRACE_S) as actors:
        await actors.submit(chat_key(1), noop)
        actor = actors.actor(chat_key(1))
        assert actor is not None
        assert actor.task is not None
        await asyncio.wait_for(actor.task, WAIT_S)  # ends by itself once idle
        assert actors.active_count == 0
        assert await actors.submit(chat_key(1), noop) == 1
        assert actors.actor(chat_key(1)) is not actor


async def test_stopping_lets_running_items_finish_and_rejects_queued_ones() -> None:
    started, gate = asyncio.Event(), asyncio.Event()

    async def turn() -> str:
        started.set()
        await gate.wait()
        return "finished"

    actors = SessionActors(shutdown_grace_s=WAIT_S)
    async with actors:
        running = asyncio.create_task(actors.submit(chat_key(1), turn))
        queued = asyncio.create_task(actors.submit(chat_key(1), turn))
        await asyncio.wait_for(started.wait(), WAIT_S)
        stopping = asyncio.create_task(actors.stop())
        with pytest.raises(SessionActorsStopped):
            await queued
        gate.set()
        assert await running == "finished"
        await stopping
    with pytest.raises(SessionActorsStopped):
        await actors.submit(chat_key(1), turn)


async def test_items_still_running_after_the_grace_are_cancelled() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def stubborn() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with SessionActors(shutdown_grace_s=0.01) as actors:
        turn = asyncio.create_task(actors.submit(chat_key(1), stubborn))
        await asyncio.wait_for(started.wait(), WAIT_S)
    assert cancelled.is_set()
    with pytest.raises(WorkItemCancelled):
        await turn


async def test_a_submitter_waiting_for_room_is_told_when_actors_stop() -> None:
    started, gate = asyncio.Event(), asyncio.Event()

    async def turn() -> str:
        started.set()
        await gate.wait()
        return "finished"

    async with SessionActors(max_pending=1, shutdown_grace_s=WAIT_S) as actors:
        running = asyncio.create_task(actors.submit(chat_key(1), turn))
        await asyncio.wait_for(started.wait(), WAIT_S)
        queued = asyncio.create_task(actors.submit(chat_key(1), turn))
        waiting = asyncio.create_task(actors.submit(chat_key(1), turn))  # the queue is full
        stopping = asyncio.create_task(actors.stop())
        with pytest.raises(SessionActorsStopped):
            await queued
        gate.set()
        assert await running == "finished"
        with pytest.raises(SessionActorsStopped):
            await asyncio.wait_for(waiting, WAIT_S)
        await stopping
