"""The channel manager at run time: supervision, routing, typing, health, stop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from bus import (
    AgentHandle,
    OutboundMessage,
    StreamSnapshot,
    TypingStarted,
    TypingStopped,
)
from bus.queue import PublishingSender
from channels.errors import FatalChannelError, MessageTooLong
from channels.health import ChannelHealth, HealthStatus
from channels.outbound.manager import ChannelManager, QuotingSender
from tests.channels.conftest import ChannelFactory, FakeClock, ManagerFactory, sample
from tests.channels.recording import RecordingChannel

Start = Callable[[ChannelManager], asyncio.Task[None]]


def out(content: str, *, chat_id: str = "c1", channel: str = "rec") -> OutboundMessage:
    return OutboundMessage(channel=channel, chat_id=chat_id, content=content)


# `wait_for`'s conditions, made by functions: these bind the channel and the count when called,
# where a lambda in a loop would see the loop's later values (ruff's B023).
def has_started(channel: RecordingChannel, times: int | None = None) -> Callable[[], bool]:
    """Started at all (`times` None), or exactly `times` times."""
    if times is None:
        return lambda: bool(channel.of("start"))
    return lambda: len(channel.of("start")) == times


def has_delivered(channel: RecordingChannel, count: int) -> Callable[[], bool]:
    """Exactly `count` messages delivered."""
    return lambda: len(channel.delivered) == count


async def started(*channels: RecordingChannel) -> None:
    for channel in channels:
        await channel.wait_for(has_started(channel))


async def test_routes_outbound_messages_to_their_channel(
    serving: ManagerFactory,
    make_channel: ChannelFactory,
    agent: AgentHandle,
    registry: CollectorRegistry,
) -> None:
    first, second = make_channel("first"), make_channel("second")
    serving(first, second)

    await agent.send(out("to the first", channel="first"))
    await agent.send(out("to the second", channel="second"))

    await first.wait_for(lambda: first.delivered == ["to the first"])
    await second.wait_for(lambda: second.delivered == ["to the second"])
    assert sample(registry, "octos_messages_out_total", channel="first") == 1


async def test_a_fatal_channel_is_down_while_another_keeps_delivering(
    serving: ManagerFactory,
    make_channel: ChannelFactory,
    agent: AgentHandle,
    registry: CollectorRegistry,
) -> None:
    broken = make_channel("broken", start_script=[FatalChannelError("401: the token is revoked")])
    healthy = make_channel("healthy")
    manager = serving(broken, healthy)
    await started(broken, healthy)
    supervisor = manager.supervisor("broken")
    assert supervisor is not None
    await broken.wait_for(
        lambda: supervisor.health_override() is not None and "401" in supervisor.reason
    )

    await agent.send(out("still here", channel="healthy"))
    await healthy.wait_for(lambda: healthy.delivered == ["still here"])

    health = await manager.health()
    assert health["broken"].status is HealthStatus.DOWN
    assert "the token is revoked" in health["broken"].reason
    assert health["healthy"].status is HealthStatus.UNKNOWN  # the channel's own default answer
    assert sample(registry, "octos_channel_up", channel="broken") == 0
    assert sample(registry, "octos_channel_up", channel="healthy") == 1


async def test_health_merges_the_channels_own_check(
    managing: ManagerFactory, make_channel: ChannelFactory, running: Start
) -> None:
    class Checked(RecordingChannel):
        async def health_check(self) -> ChannelHealth:
            return ChannelHealth.degraded("slow API")

    class Crashing(RecordingChannel):
        async def health_check(self) -> ChannelHealth:
            raise RuntimeError("health endpoint broke")

    checked = make_channel("checked", cls=Checked)
    crashing = make_channel("crashing", cls=Crashing)
    manager = managing(checked, crashing)
    assert (await manager.health())["checked"].reason == "not started"

    running(manager)
    await started(checked, crashing)
    health = await manager.health()

    assert health["checked"] == ChannelHealth.degraded("slow API")
    assert health["crashing"].status is HealthStatus.DEGRADED
    assert "health endpoint broke" in health["crashing"].reason


async def test_a_delivery_failure_never_stops_the_router(
    serving: ManagerFactory,
    make_channel: ChannelFactory,
    agent: AgentHandle,
    registry: CollectorRegistry,
) -> None:
    channel = make_channel()
    channel.fail("send", MessageTooLong("too long"), ValueError("a bug"))
    serving(channel)

    for content in ("refused", "crashes", "delivered"):
        await agent.send(out(content))
    await agent.send(out("to nowhere", channel="missing"))
    await agent.send(out("after all that"))

    await channel.wait_for(lambda: channel.delivered == ["delivered", "after all that"])
    assert sample(registry, "octos_send_errors_total", channel="rec", reason="too_long") == 1
    assert sample(registry, "octos_send_errors_total", channel="rec", reason="unknown") == 1
    assert sample(registry, "octos_send_errors_total", channel="missing", reason="no_channel") == 1


async def test_one_chat_is_delivered_in_order_while_a_slow_chat_waits(
    serving: ManagerFactory,
    make_channel: ChannelFactory,
    agent: AgentHandle,
) -> None:
    channel = make_channel()
    slow_gate = channel.hold("slow")
    serving(channel)

    for n in range(20):
        await agent.send(out(f"slow {n}", chat_id="slow"))
        await agent.send(out(f"fast {n}", chat_id="fast"))
        await agent.send(out(f"other {n}", chat_id="other"))

    def contents(chat_id: str) -> list[str]:
        return [call.content for call in channel.of("send") if call.chat_id == chat_id]

    await channel.wait_for(lambda: len(contents("fast")) == 20 and len(contents("other")) == 20)
    assert contents("slow") == []
    slow_gate.set()
    await channel.wait_for(lambda: len(contents("slow")) == 20)

    for chat_id in ("slow", "fast", "other"):
        assert contents(chat_id) == [f"{chat_id} {n}" for n in range(20)]


async def test_run_and_stop_twice(
    managing: ManagerFactory,
    make_channel: ChannelFactory,
    agent: AgentHandle,
) -> None:
    channel = make_channel()
    manager = managing(channel)

    for round_number in (1, 2):
        task = asyncio.create_task(manager.run())
        await channel.wait_for(has_started(channel, times=round_number))
        await agent.send(out(f"round {round_number}"))
        await channel.wait_for(has_delivered(channel, round_number))
        await asyncio.wait_for(manager.stop(), timeout=5)
        await asyncio.wait_for(manager.stop(), timeout=5)  # idempotent
        await asyncio.wait_for(task, timeout=5)
        assert len(channel.of("stop")) == round_number
        assert (await manager.health())["rec"] == ChannelHealth.down("stopped")

    assert channel.delivered == ["round 1", "round 2"]


async def test_stop_returns_promptly_while_a_start_ignores_it(
    managing: ManagerFactory, make_channel: ChannelFactory
) -> None:
    stubborn = make_channel("stubborn", ignore_stop=True)
    polite = make_channel("polite")
    manager = managing(stubborn, polite, stop_grace_s=0.05)
    task = asyncio.create_task(manager.run())
    await started(stubborn, polite)

    await asyncio.wait_for(manager.stop(), timeout=2)

    assert task.done()
    assert not task.cancelled()
    assert len(stubborn.of("stop")) == 1
    assert len(polite.of("stop")) == 1


async def test_stop_without_a_run_is_a_no_op(
    managing: ManagerFactory,
    make_channel: ChannelFactory,
    agent: AgentHandle,
    running: Start,
) -> None:
    channel = make_channel()
    manager = managing(channel)

    await asyncio.wait_for(manager.stop(), timeout=2)
    running(manager)
    await agent.send(out("the run after it works"))

    await channel.wait_for(lambda: channel.delivered == ["the run after it works"])
    assert channel.of("stop") == []


async def test_cancelling_run_stops_the_channels(
    managing: ManagerFactory, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    manager = managing(channel)
    task = asyncio.create_task(manager.run())
    await started(channel)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert len(channel.of("stop")) == 1
    # The bus's own sender, behind the manager's quoting of reactions, is closed.
    assert isinstance(channel.inbound, QuotingSender)
    assert isinstance(channel.inbound.inner, PublishingSender)
    assert channel.inbound.inner.is_closed


async def test_register_replaces_a_channel_of_the_same_name(
    managing: ManagerFactory, make_channel: ChannelFactory, running: Start
) -> None:
    old, new = make_channel("rec"), make_channel("rec")
    manager = managing(old, new)

    assert manager.channel("rec") is new
    assert manager.channels == [new]
    running(manager)
    await started(new)
    with pytest.raises(RuntimeError, match="before"):
        manager.register(make_channel("late"))
    assert old.calls == []


async def test_drain_waits_for_every_published_message(
    serving: ManagerFactory,
    make_channel: ChannelFactory,
    agent: AgentHandle,
) -> None:
    channel = make_channel()
    gate = channel.hold("c1")
    manager = serving(channel)
    for n in range(5):
        await agent.send(out(f"m{n}"))

    drained = asyncio.create_task(manager.drain())
    await channel.wait_for(lambda: "c1" in channel.held)
    assert not drained.done()
    gate.set()
    await asyncio.wait_for(drained, timeout=5)

    assert channel.delivered == [f"m{n}" for n in range(5)]


async def test_drain_after_the_agent_closes(
    serving: ManagerFactory,
    make_channel: ChannelFactory,
    agent: AgentHandle,
) -> None:
    channel = make_channel()
    manager = serving(channel)
    for n in range(3):
        await agent.send(out(f"m{n}"))
    agent.close()

    await asyncio.wait_for(manager.drain(), timeout=5)

    assert channel.delivered == ["m0", "m1", "m2"]


async def test_typing_runs_until_the_reply(
    serving: ManagerFactory,
    make_channel: ChannelFactory,
    agent: AgentHandle,
) -> None:
    channel = make_channel()
    manager = serving(channel, typing_interval_s=0.01)

    await agent.send(TypingStarted("rec", "c1"))
    await channel.wait_for(lambda: len(channel.of("typing")) >= 3)
    assert manager.typing.is_typing("rec", "c1")
    await agent.send(out("the answer"))
    await channel.wait_for(lambda: bool(channel.of("stop_typing")))

    kinds = [call.kind for call in channel.calls if call.kind != "start"]
    assert "typing" not in kinds[kinds.index("stop_typing") :]
    assert channel.delivered == ["the answer"]
    assert not manager.typing.is_typing("rec", "c1")
    assert all(call.content == "" for call in channel.of("typing"))


async def test_typing_stops_on_a_stop_signal(
    serving: ManagerFactory,
    make_channel: ChannelFactory,
    agent: AgentHandle,
) -> None:
    channel = make_channel()
    serving(channel, typing_interval_s=0.01)

    await agent.send(TypingStarted("rec", "c1"))
    await channel.wait_for(lambda: bool(channel.of("typing")))
    await agent.send(TypingStopped("rec", "c1"))
    await channel.wait_for(lambda: bool(channel.of("stop_typing")))

    assert channel.delivered == []


async def test_typing_has_a_safety_timeout(
    serving: ManagerFactory,
    make_channel: ChannelFactory,
    agent: AgentHandle,
    clock: FakeClock,
) -> None:
    channel = make_channel()
    channel.fail("typing", ConnectionError("typing is best effort"))
    manager = serving(channel, typing_interval_s=0.01, typing_timeout_s=60.0)

    await agent.send(TypingStarted("rec", "c1"))
    await channel.wait_for(lambda: len(channel.of("typing")) >= 2)
    clock.advance(61)
    await channel.wait_for(lambda: bool(channel.of("stop_typing")))

    assert not manager.typing.is_typing("rec", "c1")
    # The failed first call did not end the loop.
    assert [call.ok for call in channel.of("typing", ok=False)][:2] == [False, True]


async def test_only_a_final_reply_is_reported_delivered_never_its_snapshots(
    serving: ManagerFactory, make_channel: ChannelFactory, agent: AgentHandle
) -> None:
    delivered: list[tuple[str | None, bool]] = []
    channel = make_channel(editable=True)
    manager = serving(
        channel,
        on_delivered=lambda message, _ids, error: delivered.append(
            (message.delivery_id, error is None)
        ),
    )
    final = OutboundMessage(
        channel="rec", chat_id="c1", content="half and whole", stream_id="t1", delivery_id="t1"
    )
    snapshot = StreamSnapshot(final.model_copy(update={"content": "half"}))
    untracked = out("a notice without a delivery id")
    for event in (snapshot, final, untracked):
        await agent.send(event)
    await asyncio.wait_for(manager.drain(), timeout=5)

    # The journal must not take a delivered snapshot for the delivered reply.
    assert delivered == [("t1", True)]
