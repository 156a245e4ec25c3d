"""Each platform call is bounded, by one check for all running calls instead of a timer each."""

from __future__ import annotations

import asyncio

import pytest

from channels.retry import AttemptDeadlines, Retrier, RetryPolicy

BOUND_S = 0.05


async def never_answers() -> str:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def answers_at_once() -> str:
    return "sent"


async def test_a_call_past_its_bound_ends_in_timeout_error() -> None:
    deadlines = AttemptDeadlines(BOUND_S)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await deadlines.call(never_answers)
    assert loop.time() - started >= BOUND_S
    assert deadlines.running == 0
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0  # the cancellation was taken back


async def test_a_quick_call_returns_its_result_and_leaves_nothing_running() -> None:
    deadlines = AttemptDeadlines(60.0)
    assert await deadlines.call(answers_at_once) == "sent"
    assert deadlines.running == 0


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    deadlines = AttemptDeadlines(60.0)
    started = asyncio.Event()

    async def waits() -> str:
        started.set()
        return await never_answers()

    call = asyncio.create_task(deadlines.call(waits))
    await started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert deadlines.running == 0


async def test_calls_in_many_tasks_are_each_bounded_by_the_one_check() -> None:
    deadlines = AttemptDeadlines(BOUND_S)
    results = await asyncio.gather(
        *(deadlines.call(never_answers) for _ in range(5)),
        deadlines.call(answers_at_once),
        return_exceptions=True,
    )
    assert [type(result) for result in results[:5]] == [TimeoutError] * 5
    assert results[5] == "sent"


async def test_nested_calls_each_keep_their_own_deadline() -> None:
    patient, hasty = AttemptDeadlines(60.0), AttemptDeadlines(BOUND_S)

    async def outlives_a_hung_inner_call() -> str:
        with pytest.raises(TimeoutError):
            await hasty.call(never_answers)
        return "recovered"

    # The inner call's deadline passes: the outer one, far from its own, goes on.
    assert await patient.call(outlives_a_hung_inner_call) == "recovered"

    async def waits_inside_a_patient_call() -> str:
        return await patient.call(never_answers)

    # The outer call's deadline passes while the inner one waits: the outer one times out.
    with pytest.raises(TimeoutError):
        await hasty.call(waits_inside_a_patient_call)
    assert (patient.running, hasty.running) == (0, 0)


async def test_the_retrier_tries_a_hung_attempt_again() -> None:
    attempts: list[int] = []

    async def hangs_once() -> str:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            return await never_answers()
        return "sent"

    async def no_pause(_delay_s: float) -> None:
        return None

    retrier = Retrier(RetryPolicy(attempt_timeout_s=BOUND_S), sleep=no_pause)
    result = await retrier.call(hangs_once, channel="test", chat_id="c1", action="send")
    assert result == "sent"
    assert attempts == [1, 2]


def test_a_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        AttemptDeadlines(0)
