"""The bounded pipe: Rust mpsc close semantics, FIFO, backpressure, no loss."""

from __future__ import annotations

import asyncio

import pytest

from bus import PipeClosed, PipeReceiver, PipeSender, pipe

WAIT_S = 5.0


def _int_pipe(capacity: int) -> tuple[PipeSender[int], PipeReceiver[int]]:
    return pipe(capacity)


async def blocked_send(sender: PipeSender[int], item: int, *, name: str) -> asyncio.Task[None]:
    """`sender.send(item)` as a task of its own, started (on a full pipe: waiting for room)."""
    entered = asyncio.Event()

    async def send() -> None:
        entered.set()
        await sender.send(item)

    task = asyncio.create_task(send(), name=name)
    await asyncio.wait_for(entered.wait(), WAIT_S)
    return task


async def test_items_arrive_in_order() -> None:
    sender, receiver = _int_pipe(8)
    for i in range(5):
        await sender.send(i)
    sender.close()
    assert [item async for item in receiver] == [0, 1, 2, 3, 4]


async def test_recv_is_none_only_after_every_clone_is_closed_and_drained() -> None:
    sender, receiver = _int_pipe(8)
    first, second = sender.clone(), sender.clone()
    await first.send(1)
    await second.send(2)
    sender.close()
    first.close()
    assert await receiver.recv() == 1
    assert await receiver.recv() == 2

    pending = asyncio.create_task(receiver.recv(), name="recv-while-one-sender-open")
    await second.send(3)
    assert await asyncio.wait_for(pending, WAIT_S) == 3

    waiting = asyncio.create_task(receiver.recv(), name="recv-until-closed")
    second.close()
    assert await asyncio.wait_for(waiting, WAIT_S) is None
    assert await receiver.recv() is None, "stays closed"


async def test_queued_items_are_drained_before_none() -> None:
    sender, receiver = _int_pipe(3)
    for i in range(3):  # fills the pipe, so no close marker fits behind the items
        await sender.send(i)
    sender.close()
    assert [await receiver.recv() for _ in range(4)] == [0, 1, 2, None]


async def test_async_for_ends_when_the_last_sender_closes() -> None:
    sender, receiver = _int_pipe(2)

    async def produce() -> None:
        for i in range(10):
            await sender.send(i)
        sender.close()

    async with asyncio.TaskGroup() as group:
        group.create_task(produce(), name="producer")
        received = [item async for item in receiver]
    assert received == list(range(10))


async def test_closing_twice_counts_once() -> None:
    sender, receiver = _int_pipe(4)
    other = sender.clone()
    sender.close()
    sender.close()
    assert sender.is_closed
    assert not other.is_closed
    await other.send(7)
    assert await receiver.recv() == 7
    other.close()
    assert await receiver.recv() is None


async def test_send_on_a_closed_sender_raises() -> None:
    sender, _receiver = _int_pipe(4)
    keep_open = sender.clone()
    sender.close()
    with pytest.raises(PipeClosed):
        await sender.send(1)
    with pytest.raises(PipeClosed):
        sender.clone()
    await keep_open.send(1)


async def test_send_after_the_receiver_closed_raises() -> None:
    sender, receiver = _int_pipe(4)
    receiver.close()
    with pytest.raises(PipeClosed):
        await sender.send(1)


async def test_a_full_pipe_makes_the_sender_wait() -> None:
    sender, receiver = _int_pipe(2)
    await sender.send(1)
    await sender.send(2)
    entered, delivered = asyncio.Event(), asyncio.Event()

    async def third_send() -> None:
        entered.set()
        await sender.send(3)  # nothing between set() and send() yields to the loop
        delivered.set()

    task = asyncio.create_task(third_send(), name="third-send")
    await asyncio.wait_for(entered.wait(), WAIT_S)
    # The test resumed, so the task gave up the loop: it can only be parked inside send().
    assert not delivered.is_set()
    assert not task.done()
    assert receiver.depth() == 2

    assert await receiver.recv() == 1
    await asyncio.wait_for(delivered.wait(), WAIT_S)
    await task
    assert receiver.depth() == 2
    sender.close()
    assert [item async for item in receiver] == [2, 3]


async def test_many_producers_lose_nothing_and_keep_their_own_order() -> None:
    sender: PipeSender[tuple[int, int]]
    receiver: PipeReceiver[tuple[int, int]]
    sender, receiver = pipe(4)
    producers, per_producer = 12, 500

    async def produce(producer: int, own: PipeSender[tuple[int, int]]) -> None:
        for seq in range(per_producer):
            await own.send((producer, seq))
        own.close()

    received: list[tuple[int, int]] = []
    async with asyncio.TaskGroup() as group:
        for producer in range(producers):
            group.create_task(produce(producer, sender.clone()), name=f"producer-{producer}")
        sender.close()
        received = [item async for item in receiver]

    assert len(received) == producers * per_producer
    for producer in range(producers):
        sequence = [seq for p, seq in received if p == producer]
        assert sequence == list(range(per_producer))


async def test_close_during_a_blocked_send_still_delivers_before_none() -> None:
    sender, receiver = _int_pipe(1)
    await sender.send(1)
    task = await blocked_send(sender, 2, name="blocked-send")
    assert await receiver.recv() == 1  # frees a slot; the blocked send is woken, not yet run
    sender.close()  # e.g. a channel stopping while its last send is in flight
    assert await asyncio.wait_for(receiver.recv(), WAIT_S) == 2
    assert await asyncio.wait_for(receiver.recv(), WAIT_S) is None
    await task


async def test_cancelled_send_on_a_closed_sender_still_releases_the_pipe() -> None:
    sender, receiver = _int_pipe(1)
    await sender.send(1)
    task = await blocked_send(sender, 2, name="cancelled-send")
    sender.close()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await receiver.recv() == 1
    assert await asyncio.wait_for(receiver.recv(), WAIT_S) is None


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        pipe(0)
