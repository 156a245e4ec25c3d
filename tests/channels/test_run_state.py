"""A receiving channel's run state, and the health it reports."""

from __future__ import annotations

import asyncio

import pytest

from channels.errors import FatalChannelError
from channels.health import ChannelHealth
from channels.lifecycle.run_state import CredentialsCheck, RunState


def test_starting_before_receiving_then_healthy() -> None:
    state = RunState()
    assert state.idle.is_set()
    assert state.health() == ChannelHealth.starting("not receiving yet")
    assert not state.health().takes_messages
    state.receiving.set()
    assert state.health() == ChannelHealth.healthy()
    assert state.ended() is None


def test_a_channels_own_view_of_its_connection_counts_while_it_runs() -> None:
    state = RunState()
    assert state.health(ChannelHealth.degraded("reconnecting")) == ChannelHealth.degraded(
        "reconnecting"
    )


def test_down_once_stopped_or_after_a_fatal_error() -> None:
    state = RunState()
    state.receiving.set()
    state.stopping.set()
    assert state.health(ChannelHealth.healthy()) == ChannelHealth.down("stopped")
    state.fatal = FatalChannelError("token rejected", channel="line")
    assert state.ended() == ChannelHealth.down("line: token rejected")


async def test_receive_until_ends_on_stop_or_raises_the_recorded_fatal_error() -> None:

    from channels.errors import AuthError

    state = RunState()
    async with state.running():
        assert not state.idle.is_set()
        waiting = asyncio.create_task(state.receive_until(name="test-watch"))
        await asyncio.wait_for(state.receiving.wait(), 1)
        state.stopping.set()
        await asyncio.wait_for(waiting, 1)
    assert state.idle.is_set()
    assert not state.receiving.is_set()

    rejected = RunState()
    async with rejected.running():
        waiting = asyncio.create_task(rejected.receive_until(name="test-watch"))
        await asyncio.wait_for(rejected.receiving.wait(), 1)
        fatal = rejected.refused(
            "X refused the token", AuthError("revoked", suggestion="rotate it"), channel="x"
        )
        with pytest.raises(FatalChannelError, match="X refused the token") as raised:
            await asyncio.wait_for(waiting, 1)
    assert raised.value is fatal
    assert (str(fatal), fatal.suggestion) == (
        "x: X refused the token (revoked; rotate it); rotate it",
        "rotate it",
    )
    assert rejected.idle.is_set()
    assert rejected.health() == ChannelHealth.down(str(fatal))


def test_a_channel_that_went_down_stays_down() -> None:
    down = ChannelHealth.down("token refused")
    assert ChannelHealth.unknown().then(ChannelHealth.healthy()) == ChannelHealth.healthy()
    assert ChannelHealth.healthy().then(down) == down
    assert down.then(ChannelHealth.healthy()) == down


async def test_a_refused_credentials_check_is_the_fatal_error_of_the_run() -> None:
    from channels.errors import AuthError, TransientError

    async def refused() -> None:
        raise AuthError("401", suggestion="check the token")

    async def unreachable() -> None:
        raise TransientError("timed out")

    async def accepted() -> str:
        return "@bot"

    state = RunState()
    await state.check_credentials(CredentialsCheck(accepted, "X refused the token", "x"))
    with pytest.raises(TransientError):  # not a refusal: the supervisor tries again
        await state.check_credentials(CredentialsCheck(unreachable, "X refused the token", "x"))
    assert state.fatal is None
    with pytest.raises(FatalChannelError, match="X refused the token") as raised:
        await state.check_credentials(CredentialsCheck(refused, "X refused the token", "x"))
    # mypy still holds `state.fatal` to the None asserted before the call that set it.
    assert (state.fatal, raised.value.suggestion) == (raised.value, "check the token")  # type: ignore[comparison-overlap]
    assert state.dead.is_set()


async def test_run_until_stopped_is_cancelled_by_stop_and_a_stopped_state_runs_nothing() -> None:
    state = RunState()
    started = asyncio.Event()

    async def receive() -> None:
        state.receiving.set()
        started.set()
        await asyncio.Event().wait()  # until cancelled

    run = asyncio.create_task(state.run_until_stopped(receive(), name="test-receive"))
    await asyncio.wait_for(started.wait(), 1)
    assert not state.idle.is_set()
    await asyncio.wait_for(state.stop(), 1)
    await asyncio.wait_for(run, 1)
    assert state.idle.is_set()
    assert not state.receiving.is_set()
    assert state.health() == ChannelHealth.down("stopped")

    ran: list[str] = []

    async def never() -> None:
        ran.append("ran")

    await state.run(never())
    await state.run_until_stopped(never(), name="test-late")
    assert ran == []


async def test_a_fatal_error_leaving_run_is_the_runs_fatal_error() -> None:
    state = RunState()
    fatal = FatalChannelError("the gateway refused the identify", channel="x")

    async def refused() -> None:
        raise fatal

    with pytest.raises(FatalChannelError):
        await state.run(refused())
    assert state.fatal is fatal
    assert state.idle.is_set()
    assert state.health() == ChannelHealth.down(str(fatal))


def test_a_reported_connection_state_is_the_health_until_the_run_ends() -> None:
    state = RunState(ChannelHealth.unknown())
    assert state.health() == ChannelHealth.unknown()
    state.report(ChannelHealth.degraded("polling failed"))
    assert state.health() == ChannelHealth.degraded("polling failed")
    state.report(ChannelHealth.healthy())
    assert state.health() == ChannelHealth.healthy()
    state.report(ChannelHealth.down("gone"))
    state.report(ChannelHealth.healthy())
    assert state.health() == ChannelHealth.down("gone")

    waiting = RunState(not_receiving=ChannelHealth.degraded("not connected"))
    assert waiting.health() == ChannelHealth.degraded("not connected")
    waiting.receiving.set()
    assert waiting.health() == ChannelHealth.healthy()


async def test_stop_within_gives_up_on_a_start_that_does_not_end() -> None:
    state = RunState()
    started, release = asyncio.Event(), asyncio.Event()

    async def deaf() -> None:
        started.set()
        await release.wait()  # does not watch `stopping`

    run = asyncio.create_task(state.run(deaf()))
    await asyncio.wait_for(started.wait(), 1)
    assert not state.idle.is_set()
    await state.stop_within(0.01, channel="test")
    assert state.stopping.is_set()
    assert not state.idle.is_set()
    release.set()
    await asyncio.wait_for(run, 1)
    assert state.idle.is_set()
