"""Supervision of one channel's receiver: `start()` restarted until it is stopped or gives up.

A transient failure (any exception but `FatalChannelError`, or `start()` returning while nobody
asked it to stop) restarts the channel after an exponential backoff with full jitter. More
than `max_restarts` restarts within `window_s` means something is persistently wrong: the
channel is marked Down. A `FatalChannelError` (a bad token) marks it Down at once. Either way
the other channels keep running; this is one of the gateway's three supervision points.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum

import structlog

from bus import InboundSender, PipeClosed
from channels.base import Channel
from channels.errors import FatalChannelError
from channels.health import ChannelHealth
from channels.metrics import ChannelMetrics
from channels.retry import Backoff, Clock, Jitter, Sleep, full_jitter
from channels.stopping import sleep_unless_set

log = structlog.get_logger(__name__)

#: How the supervisor runs a channel's receiver: by default `channel.start(inbound)`. A
#: cluster's ingress injects `channels.lifecycle.run_state.LeasedChannels`, which starts a
#: single-poller channel only while this process holds its lease. `stopping` is set once the
#: channel is asked to stop, so a strategy that is still waiting to start it can give up.
RunChannel = Callable[[Channel, InboundSender, asyncio.Event], Awaitable[None]]


async def start_channel(channel: Channel, inbound: InboundSender, stopping: asyncio.Event) -> None:
    """The default `RunChannel`: the channel's own `start()`, which `stop()` ends."""
    await channel.start(inbound)


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """How often and how soon a failed channel is started again."""

    backoff: Backoff = field(default_factory=lambda: Backoff(initial_s=1.0, max_s=60.0))
    max_restarts: int = 20
    window_s: float = 3600.0
    #: A run at least this long counts as a success: the next failure backs off from the start.
    stable_after_s: float = 60.0
    #: How long `channel.stop()` may take before it is abandoned.
    stop_timeout_s: float = 5.0


class SupervisorState(StrEnum):
    IDLE = "idle"
    RUNNING = "running"
    RESTARTING = "restarting"
    DOWN = "down"
    STOPPED = "stopped"


def _fatal_in(exc: BaseException) -> FatalChannelError | None:
    """The fatal error in `exc`, also when a channel's own task group wrapped it."""
    if isinstance(exc, FatalChannelError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (fatal := _fatal_in(inner)) is not None:
                return fatal
    return None


class ChannelSupervisor:
    def __init__(
        self,
        channel: Channel,
        open_inbound: Callable[[], InboundSender],
        metrics: ChannelMetrics,
        *,
        policy: RestartPolicy | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        jitter: Jitter = full_jitter,
        run_channel: RunChannel = start_channel,
    ) -> None:
        self.channel = channel
        self._run_channel = run_channel
        self.policy = policy or RestartPolicy()
        self._open_inbound = open_inbound
        self._metrics = metrics
        self._clock = clock
        self._sleep = sleep
        self._jitter = jitter
        self._stop_requested = asyncio.Event()
        self._channel_stopped = False
        self._restarts: deque[float] = deque()
        self.state = SupervisorState.IDLE
        self.reason = ""
        self.restart_count = 0

    @property
    def name(self) -> str:
        return self.channel.name

    def health_override(self) -> ChannelHealth | None:
        """What the supervisor knows better than the channel; None while it runs."""
        if self.state is SupervisorState.RUNNING:
            return None
        if self.state is SupervisorState.RESTARTING:
            return ChannelHealth.degraded(f"restarting: {self.reason}")
        if self.state is SupervisorState.DOWN:
            return ChannelHealth.down(self.reason)
        if self.state is SupervisorState.STOPPED:
            return ChannelHealth.down("stopped")
        return ChannelHealth.starting("not started")

    async def run(self) -> None:
        """Run the channel until `stop()`, cancellation, a fatal error or giving up.

        One supervisor serves one run: `stop()` may come before `run()` has begun.
        """
        try:
            inbound = self._open_inbound()
        except PipeClosed:
            self._give_up("the bus is closed: no inbound messages can be published", None)
            return
        try:
            await self._supervise(inbound)
        except asyncio.CancelledError:
            if not self._channel_stopped:
                await self._stop_channel()
            raise
        finally:
            inbound.close()
            if self.state is not SupervisorState.DOWN:
                self._set_state(SupervisorState.STOPPED, "")

    async def stop(self) -> None:
        """Ask the channel to stop; `run()` then returns once `start()` does. Idempotent."""
        self._stop_requested.set()
        if not self._channel_stopped:
            await self._stop_channel()

    async def _supervise(self, inbound: InboundSender) -> None:
        failures = 0
        while not self._stop_requested.is_set():
            self._set_state(SupervisorState.RUNNING, "")
            started_at = self._clock()
            try:
                await self._run_channel(self.channel, inbound, self._stop_requested)
                failure = "start() returned while the channel was meant to run"
            except Exception as exc:
                if (fatal := _fatal_in(exc)) is not None:
                    self._give_up(str(fatal), exc)
                    return
                if self._stop_requested.is_set():
                    log.info(
                        "channel.failed_while_stopping",
                        channel=self.name,
                        error=str(exc),
                    )
                    return
                failure = f"{type(exc).__name__}: {exc}"
                # The retry's one warning line (`channel.restarting`) carries the error; the
                # (often long, chained) traceback is for debug.
                log.debug("channel.failure_traceback", channel=self.name, exc_info=exc)
            if self._stop_requested.is_set():
                return
            failures = (
                1 if self._clock() - started_at >= self.policy.stable_after_s else failures + 1
            )
            if not await self._back_off(failures, failure):
                return

    async def _back_off(self, failures: int, failure: str) -> bool:
        """Wait before the next restart; False when the channel is stopping or gave up."""
        now = self._clock()
        while self._restarts and now - self._restarts[0] >= self.policy.window_s:
            self._restarts.popleft()
        if len(self._restarts) >= self.policy.max_restarts:
            self._give_up(
                f"gave up after {len(self._restarts)} restarts within "
                f"{self.policy.window_s:g} s; last error: {failure}",
                None,
            )
            return False
        delay_s = self._jitter(self.policy.backoff.delay_s(failures))
        self._set_state(SupervisorState.RESTARTING, failure)
        log.warning(
            "channel.restarting",
            channel=self.name,
            attempt=failures,
            delay_s=round(delay_s, 3),
            error=failure,
        )
        if await sleep_unless_set(self._stop_requested, delay_s, self._sleep):
            return False
        self._restarts.append(self._clock())
        self.restart_count += 1
        self._metrics.channel_restarted(self.name)
        return True

    def _give_up(self, reason: str, exc: BaseException | None) -> None:
        self._set_state(SupervisorState.DOWN, reason)
        # A fatal error is raised on purpose and says what to fix (a refused token, a taken
        # port): one line; its traceback is the channel's own code, for debug.
        log.error("channel.down", channel=self.name, reason=reason)
        if exc is not None:
            log.debug("channel.failure_traceback", channel=self.name, exc_info=exc)

    def _set_state(self, state: SupervisorState, reason: str) -> None:
        self.state, self.reason = state, reason
        self._metrics.set_channel_up(self.name, state is SupervisorState.RUNNING)

    async def _stop_channel(self) -> None:
        self._channel_stopped = True
        try:
            async with asyncio.timeout(self.policy.stop_timeout_s):
                await self.channel.stop()
        except TimeoutError:
            log.warning(
                "channel.stop_timed_out", channel=self.name, timeout_s=self.policy.stop_timeout_s
            )
        except Exception as exc:
            log.warning("channel.stop_failed", channel=self.name, error=str(exc), exc_info=exc)
