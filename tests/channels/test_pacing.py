"""The outbound scheduler: buckets, priorities and holds, on virtual time.

aiolimiter's buckets read the event loop's clock, so these tests run on a loop whose clock
jumps to the next timer (`tests/support/virtual_time.py`): no real waiting, and every turn is
given at an exact time.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest

from bus import OutboundEvent, OutboundMessage, StreamSnapshot, create_bus
from channels.errors import DeliveryError, RateLimited
from channels.outbound.manager import ChannelManager
from channels.retry import Reason, Retrier, reply_deadline
from channels.retry.pacing import CHAT_POLL_S, Pacer, Priority, Rate, RateLimits
from tests.channels.recording import RecordingChannel
from tests.support.virtual_time import run_virtual

EPSILON = 1e-6


def now() -> float:
    return asyncio.get_running_loop().time()


async def turns_at(pacer: Pacer, calls: list[tuple[str, Priority]]) -> list[tuple[str, float]]:
    """Every call started at once; (chat, when its turn came), in the order they came."""
    granted: list[tuple[str, float]] = []

    async def one(chat_id: str, priority: Priority) -> None:
        await pacer.turn(chat_id, priority)
        granted.append((chat_id, now()))

    async with asyncio.TaskGroup() as group:
        for chat_id, priority in calls:
            group.create_task(one(chat_id, priority))
    return granted


def within_bucket(times: list[float], rate: Rate) -> bool:
    """No stretch of the turns holds more than the bucket allows: its burst, and its rate over
    the stretch's length."""
    times = sorted(times)
    return all(
        later - earlier + 1
        <= rate.count + (times[later] - times[earlier]) * rate.count / rate.per_s + EPSILON
        for earlier, later in itertools.combinations(range(len(times)), 2)
    )


def test_a_burst_to_many_chats_is_spread_over_the_account_rate() -> None:
    rate = Rate(30, 1.0)

    async def main() -> list[tuple[str, float]]:
        pacer = Pacer("t", RateLimits(account=rate))
        return await turns_at(pacer, [(f"chat{n}", Priority.REPLY) for n in range(90)])

    granted = run_virtual(main())
    times = [at for _chat, at in granted]
    assert within_bucket(times, rate)
    # The burst at once, then the rest at the rate: 60 more take 2 s, and not longer.
    assert sum(at == 0 for at in times) == 30
    assert max(times) == pytest.approx(2.0, abs=0.01)


def test_one_chat_is_spaced_by_its_own_rate_and_a_group_by_both() -> None:
    chat, group = Rate(1, 1.0), Rate(3, 30.0)

    async def main() -> tuple[list[float], list[float]]:
        pacer = Pacer("t", RateLimits(chat=chat, group=group), is_group=lambda c: c.startswith("-"))
        private, grouped = [], []
        for _ in range(5):  # one chat's deliveries go one after another, as its lane sends
            async with pacer.sending("42"):
                private.append(now())
        for _ in range(5):
            async with pacer.sending("-42"):
                grouped.append(now())
        return private, grouped

    private, grouped = run_virtual(main())
    assert within_bucket(private, chat)
    assert all(
        1.0 - EPSILON <= b - a <= 1.0 + CHAT_POLL_S + EPSILON
        for a, b in itertools.pairwise(private)
    )
    assert within_bucket(grouped, chat)
    assert within_bucket(grouped, group)
    # The group's burst of 3 goes at the chat's pace, the rest at the group's (one per 10 s).
    assert grouped[2] - grouped[0] < 3
    assert grouped[3] - grouped[2] > 5


def test_replies_go_before_edits_waiting_for_the_account() -> None:
    async def main() -> list[str]:
        pacer = Pacer("t", RateLimits(account=Rate(1, 1.0)))
        await pacer.turn("first")  # the bucket is full from here on: everyone waits
        calls = [(f"edit{n}", Priority.EDIT) for n in range(1, 4)]
        calls += [(f"reply{n}", Priority.REPLY) for n in range(1, 3)]
        return [chat for chat, _at in await turns_at(pacer, calls)]

    # The edit already waiting at the account when the replies came keeps its place; every
    # other edit waits for the replies.
    assert run_virtual(main()) == ["edit1", "reply1", "reply2", "edit2", "edit3"]


def test_a_refusal_holds_its_chat_for_the_whole_retry_after_and_no_other() -> None:
    async def main() -> tuple[list[tuple[str, float]], bool, bool]:
        pacer = Pacer("t", RateLimits())
        pacer.refused("a", 7.0)
        held_then = pacer.held("a"), pacer.held("b")
        granted = await turns_at(pacer, [("a", Priority.REPLY), ("b", Priority.REPLY)])
        return granted, *held_then

    granted, a_held, b_held = run_virtual(main())
    assert (a_held, b_held) == (True, False)
    assert granted == [("b", 0.0), ("a", 7.0)]


def test_chats_refused_together_hold_the_whole_account_for_the_longest_wait() -> None:
    async def main() -> list[tuple[str, float]]:
        pacer = Pacer("t", RateLimits())
        pacer.refused("a", 3.0)
        await asyncio.sleep(0.5)
        pacer.refused("b", 5.0)
        return await turns_at(pacer, [("c", Priority.REPLY)])

    assert run_virtual(main()) == [("c", 5.5)]


def test_a_refusal_the_platform_calls_global_holds_the_account() -> None:
    async def main() -> list[tuple[str, float]]:
        pacer = Pacer("t", RateLimits())
        pacer.refused("a", 4.0, account_wide=True)
        return await turns_at(pacer, [("b", Priority.REPLY)])

    assert run_virtual(main()) == [("b", 4.0)]


async def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"a paced call slept {seconds} s itself instead of the chat holding")


def test_a_429_holds_the_chat_for_every_call_not_just_the_one_refused() -> None:
    async def main() -> list[tuple[str, float]]:
        pacer = Pacer("t", RateLimits())
        retrier = Retrier(sleep=_no_sleep, pacer_of=lambda channel: pacer)
        refusals = iter([RateLimited(7.0)])
        sent: list[tuple[str, float]] = []

        async def send(what: str) -> str:
            if (refusal := next(refusals, None)) is not None:
                raise refusal
            sent.append((what, now()))
            return what

        def sending(what: str) -> Callable[[], Awaitable[str]]:
            return lambda: send(what)

        first = asyncio.create_task(
            retrier.call(sending("reply"), channel="t", chat_id="a", action="send")
        )
        await asyncio.sleep(1)
        await retrier.call(
            sending("edit"), channel="t", chat_id="a", action="edit", priority=Priority.EDIT
        )
        await first
        return sent

    # The edit came a second after the refusal, and the chat was still held for 6 s more; the
    # reply went first, as the earlier call of the higher priority.
    assert run_virtual(main()) == [("reply", 7.0), ("edit", 7.0)]


def test_a_hold_past_the_reply_deadline_expires_the_reply() -> None:
    async def main() -> DeliveryError:
        pacer = Pacer("t", RateLimits())
        retrier = Retrier(sleep=_no_sleep, pacer_of=lambda channel: pacer, wall_clock=now)

        async def refused() -> None:
            raise RateLimited(60.0)

        reply_deadline.set(now() + 30.0)
        with pytest.raises(DeliveryError) as caught:
            await retrier.call(refused, channel="t", chat_id="a", action="send")
        return caught.value

    assert run_virtual(main()).reason == Reason.EXPIRED


def test_under_pressure_a_streams_edits_coalesce_and_its_final_is_delivered() -> None:
    final_text = " ".join(f"word{n}" for n in range(40))

    async def main() -> RecordingChannel:
        agent, publisher = create_bus()
        channel = RecordingChannel("rec", clock=now, editable=True, edit_interval_s=0.1)
        manager = ChannelManager("p", publisher, clock=now, sleep=asyncio.sleep)
        manager.register(channel, rate_limits=RateLimits(account=Rate(5, 1.0)))
        events: list[OutboundEvent] = [
            OutboundMessage(channel="rec", chat_id=f"other{n}", content=f"reply {n}")
            for n in range(50)
        ]
        for words in range(1, 41):
            content = " ".join(f"word{n}" for n in range(words))
            events.append(
                StreamSnapshot(
                    OutboundMessage(channel="rec", chat_id="s", content=content, stream_id="1")
                )
            )
        events.append(
            OutboundMessage(channel="rec", chat_id="s", content=final_text, stream_id="1")
        )
        async with asyncio.TaskGroup() as group:
            group.create_task(manager.run())
            for event in events:
                await agent.send(event)
                await asyncio.sleep(0.05)  # the agent streams over 4.5 s
            await manager.drain()
            await manager.stop()
        return channel

    channel = run_virtual(main())
    assert len(channel.of("send")) == 50
    stream = [call for call in channel.calls if call.chat_id == "s" and call.ok]
    edits = [call for call in stream if call.kind in ("edit", "finish")]
    # Far fewer edits than snapshots, and the last thing the stream shows is its final text.
    assert len(edits) < 10
    assert stream[-1].content == final_text
