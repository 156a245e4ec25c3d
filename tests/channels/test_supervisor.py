"""Supervision of a channel's receiver: restarts with backoff, Down when fatal or hopeless."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from bus import AgentHandle, BusPublisher
from bus.queue import PublishingSender
from channels.errors import FatalChannelError
from channels.health import HealthStatus
from channels.lifecycle.supervisor import ChannelSupervisor, RestartPolicy, SupervisorState
from channels.metrics import ChannelMetrics
from channels.retry import no_jitter
from tests.channels.conftest import ChannelFactory, FakeClock, sample
from tests.channels.recording import RETURN, RecordingChannel


def supervise(
    channel: RecordingChannel,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
    clock: FakeClock,
    **policy: float,
) -> ChannelSupervisor:
    return ChannelSupervisor(
        channel,
        bus[1].inbound_sender,
        metrics,
        policy=RestartPolicy(**policy),  # type: ignore[arg-type]
        clock=clock,
        sleep=clock.sleep,
        jitter=no_jitter,
    )


async def test_restarts_with_growing_backoff_then_gives_up(
    make_channel: ChannelFactory,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    channel = make_channel(start_script=[ConnectionError(f"drop {n}") for n in range(30)])
    supervisor = supervise(channel, bus, metrics, clock, max_restarts=8)

    await asyncio.wait_for(supervisor.run(), timeout=5)

    assert clock.sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert len(channel.of("start")) == 9
    assert supervisor.state is SupervisorState.DOWN
    assert "gave up after 8 restarts" in supervisor.reason
    assert "drop 8" in supervisor.reason
    health = supervisor.health_override()
    assert health is not None
    assert health.status is HealthStatus.DOWN
    assert sample(registry, "octos_channel_restarts_total", channel="rec") == 8
    assert sample(registry, "octos_channel_up", channel="rec") == 0


async def test_default_policy_allows_twenty_restarts_an_hour(
    make_channel: ChannelFactory,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
    clock: FakeClock,
) -> None:
    channel = make_channel(start_script=[OSError("flaky")] * 40)
    supervisor = supervise(channel, bus, metrics, clock)

    await asyncio.wait_for(supervisor.run(), timeout=5)

    assert supervisor.restart_count == 20
    assert supervisor.state is SupervisorState.DOWN
    assert max(clock.sleeps) == 60.0


async def test_restarts_spread_over_more_than_the_window_never_give_up(
    make_channel: ChannelFactory,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
    clock: FakeClock,
) -> None:
    # Each start runs for an hour (the clock moves on) before it fails.
    channel = make_channel(
        start_script=[ConnectionError("hourly hiccup")] * 6,
        on_start=lambda: clock.advance(3601),
    )
    supervisor = supervise(channel, bus, metrics, clock, max_restarts=2)
    task = asyncio.create_task(supervisor.run())
    await channel.wait_for(lambda: len(channel.of("start")) >= 7)

    assert supervisor.health_override() is None  # running
    # Each failure followed a long run, so the backoff starts over every time.
    assert clock.sleeps == [1.0] * 6
    await supervisor.stop()
    await asyncio.wait_for(task, timeout=5)
    assert supervisor.state is SupervisorState.STOPPED


async def test_fatal_error_marks_down_at_once(
    make_channel: ChannelFactory,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
    clock: FakeClock,
) -> None:
    channel = make_channel(start_script=[FatalChannelError("401 Unauthorized: check the token")])
    supervisor = supervise(channel, bus, metrics, clock)

    await asyncio.wait_for(supervisor.run(), timeout=5)

    assert clock.sleeps == []
    assert supervisor.state is SupervisorState.DOWN
    assert "401 Unauthorized: check the token" in supervisor.reason


async def test_fatal_error_inside_an_exception_group_is_fatal(
    make_channel: ChannelFactory,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
    clock: FakeClock,
) -> None:
    group = ExceptionGroup("task group", [FatalChannelError("bad token")])
    channel = make_channel(start_script=[group])
    supervisor = supervise(channel, bus, metrics, clock)

    await asyncio.wait_for(supervisor.run(), timeout=5)

    assert supervisor.state is SupervisorState.DOWN
    assert "bad token" in supervisor.reason


async def test_start_returning_unexpectedly_is_restarted(
    make_channel: ChannelFactory,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
    clock: FakeClock,
) -> None:
    channel = make_channel(start_script=[RETURN, RETURN])
    supervisor = supervise(channel, bus, metrics, clock)
    task = asyncio.create_task(supervisor.run())

    await channel.wait_for(lambda: len(channel.of("start")) == 3)
    assert clock.sleeps == [1.0, 2.0]
    assert supervisor.state is SupervisorState.RUNNING
    assert supervisor.health_override() is None

    await supervisor.stop()
    await asyncio.wait_for(task, timeout=5)
    assert len(channel.of("stop")) == 1


async def test_restarting_reports_degraded(
    make_channel: ChannelFactory,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
) -> None:
    backing_off = asyncio.Event()

    async def endless_sleep(seconds: float) -> None:
        backing_off.set()
        await asyncio.Event().wait()

    channel = make_channel(start_script=[ConnectionError("network unreachable")])
    supervisor = ChannelSupervisor(
        channel, bus[1].inbound_sender, metrics, sleep=endless_sleep, jitter=no_jitter
    )
    task = asyncio.create_task(supervisor.run())
    await asyncio.wait_for(backing_off.wait(), timeout=5)

    health = supervisor.health_override()
    assert health is not None
    assert health.status is HealthStatus.DEGRADED
    assert "network unreachable" in health.reason

    # A stop during the backoff ends the supervisor without waiting the backoff out.
    await supervisor.stop()
    await asyncio.wait_for(task, timeout=5)
    assert supervisor.state is SupervisorState.STOPPED
    assert len(channel.of("start")) == 1


async def test_cancellation_propagates_and_stops_the_channel(
    make_channel: ChannelFactory,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
    clock: FakeClock,
) -> None:
    channel = make_channel(ignore_stop=True)
    supervisor = supervise(channel, bus, metrics, clock)
    task = asyncio.create_task(supervisor.run())
    await channel.wait_for(lambda: bool(channel.of("start")))
    inbound = channel.inbound
    assert isinstance(inbound, PublishingSender)  # the bus's own, as `supervise` opens it

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert task.cancelled()
    assert len(channel.of("stop")) == 1
    assert inbound.is_closed
    assert supervisor.state is SupervisorState.STOPPED


async def test_inbound_messages_reach_the_agent(
    make_channel: ChannelFactory,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
    clock: FakeClock,
) -> None:
    agent, _publisher = bus
    channel = make_channel()
    supervisor = supervise(channel, bus, metrics, clock)
    task = asyncio.create_task(supervisor.run())
    await channel.wait_for(lambda: bool(channel.of("start")))

    await channel.receive("hello bot", chat_id="42")
    received = await asyncio.wait_for(agent.recv(), timeout=5)

    assert received is not None
    assert (received.channel, received.chat_id, received.content) == ("rec", "42", "hello bot")
    await supervisor.stop()
    await asyncio.wait_for(task, timeout=5)


async def test_a_retry_is_one_warning_line_with_the_traceback_at_debug(
    make_channel: ChannelFactory,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
    clock: FakeClock,
) -> None:
    from structlog.testing import capture_logs

    channel = make_channel(start_script=[ConnectionError("refused")] * 3)
    supervisor = supervise(channel, bus, metrics, clock, max_restarts=2)
    with capture_logs() as events:
        await asyncio.wait_for(supervisor.run(), timeout=5)
    above_debug = [(e["event"], e["log_level"]) for e in events if e["log_level"] != "debug"]
    # Two retries, then the third failure gives up.
    assert above_debug == [
        ("channel.restarting", "warning"),
        ("channel.restarting", "warning"),
        ("channel.down", "error"),
    ]
    retries = [event for event in events if event["event"] == "channel.restarting"]
    assert [(e["attempt"], e["delay_s"]) for e in retries] == [(1, 1.0), (2, 2.0)]
    assert all(e["error"] == "ConnectionError: refused" for e in retries)
    assert all("exc_info" not in event for event in events if event["log_level"] != "debug")
    traces = [event for event in events if event["event"] == "channel.failure_traceback"]
    assert [event["log_level"] for event in traces] == ["debug"] * 3
    assert all(isinstance(event["exc_info"], ConnectionError) for event in traces)


async def test_a_fatal_error_is_one_error_line_with_the_traceback_at_debug(
    make_channel: ChannelFactory,
    bus: tuple[AgentHandle, BusPublisher],
    metrics: ChannelMetrics,
    clock: FakeClock,
) -> None:
    from structlog.testing import capture_logs

    refused = FatalChannelError("the port is taken", suggestion="choose a free port")
    channel = make_channel(start_script=[refused])
    supervisor = supervise(channel, bus, metrics, clock)
    with capture_logs() as events:
        await asyncio.wait_for(supervisor.run(), timeout=5)
    (down,) = [event for event in events if event["log_level"] != "debug"]
    assert (down["event"], down["log_level"]) == ("channel.down", "error")
    assert down["reason"] == "the port is taken; choose a free port"
    assert "exc_info" not in down
    (trace,) = [event for event in events if event["event"] == "channel.failure_traceback"]
    assert (trace["log_level"], trace["exc_info"]) == ("debug", refused)
