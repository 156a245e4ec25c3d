"""Commands put during one loop iteration reach the writer thread together, in order."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sessions.writer import Handover


async def test_one_iteration_is_one_hand_over_and_order_is_kept() -> None:
    sealed: list[int] = []
    handover: Handover[int] = Handover(on_hand_over=lambda: sealed.append(1))
    handover.bind(asyncio.get_running_loop())
    taken: list[list[int]] = []
    done = threading.Event()

    def writer() -> None:
        while sum(len(batch) for batch in taken) < 5:
            taken.append(handover.take())
        done.set()

    for command in (1, 2, 3):
        handover.put(command)
    await asyncio.sleep(0)  # one iteration of the loop: the hand-over ran before this resumes
    assert sealed == [1]
    thread = threading.Thread(target=writer)
    thread.start()
    handover.put(4)
    handover.put(5)
    await asyncio.to_thread(done.wait)
    thread.join()
    assert [command for batch in taken for command in batch] == [1, 2, 3, 4, 5]
    assert taken[0][:3] == [1, 2, 3]  # one batch for what the first iteration put
    assert len(sealed) == 2


def test_a_put_before_bind_says_the_writer_is_not_running() -> None:
    handover: Handover[int] = Handover()
    with pytest.raises(RuntimeError, match="not running"):
        handover.put(1)


@pytest.mark.parametrize("extra_iterations", [0, 1, 2])
async def test_extra_iterations_gather_what_later_iterations_put(extra_iterations: int) -> None:
    """What callbacks made ready by the following iterations put (the dispatcher routing the
    message just journaled, then a turn answering it) is handed over with it, and nothing
    waits longer than those iterations."""
    hand_overs: list[int] = []
    handover: Handover[str] = Handover(
        on_hand_over=lambda: hand_overs.append(1), extra_iterations=extra_iterations
    )
    loop = asyncio.get_running_loop()
    handover.bind(loop)
    handover.put("message")

    def route() -> None:  # runs in the next iteration, and makes the answer ready for the one after
        loop.call_soon(handover.put, "its answer")

    loop.call_soon(route)
    for _ in range(5):
        await asyncio.sleep(0)  # five iterations: every hand-over has run
    assert await asyncio.to_thread(handover.take) == ["message", "its answer"]
    assert len(hand_overs) == (1 if extra_iterations == 2 else 2)
