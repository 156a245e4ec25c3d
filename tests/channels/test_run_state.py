"""A receiving channel's run state, and the health it reports."""

from __future__ import annotations

from channels.errors import FatalChannelError
from channels.health import ChannelHealth
from channels.run_state import RunState


def test_unknown_before_receiving_then_healthy() -> None:
    state = RunState()
    assert state.idle.is_set()
    assert state.health() == ChannelHealth.unknown()
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
