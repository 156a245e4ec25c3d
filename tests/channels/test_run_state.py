"""A receiving channel's run state, and the health it reports."""

from __future__ import annotations

import asyncio

import pytest

from channels.errors import FatalChannelError
from channels.health import ChannelHealth
from channels.lifecycle.run_state import RunState


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
    await state.check_credentials(accepted, "X refused the token", channel="x")
    with pytest.raises(TransientError):  # not a refusal: the supervisor tries again
        await state.check_credentials(unreachable, "X refused the token", channel="x")
    assert state.fatal is None
    with pytest.raises(FatalChannelError, match="X refused the token") as raised:
        await state.check_credentials(refused, "X refused the token", channel="x")
    # mypy still holds `state.fatal` to the None asserted before the call that set it.
    assert (state.fatal, raised.value.suggestion) == (raised.value, "check the token")  # type: ignore[comparison-overlap]
    assert state.dead.is_set()
