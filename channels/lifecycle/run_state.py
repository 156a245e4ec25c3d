"""Where a receiving channel is in its life, and the health that follows from it.

Every channel that receives in `start()` keeps the same four facts: `stopping` (set by
`stop()`; a stopped channel stays stopped), `idle` (set while no `start()` runs, so `stop()`
can wait for it to let go of its connections), `receiving` (set while `start()` takes
messages; tests and `wait_receiving` wait on it) and `fatal` (the `FatalChannelError` that
ended it: `refused` records the platform refusing the credentials, at start or mid-run, and
wakes `receive_until`; any `FatalChannelError` that leaves `running()` is recorded too).
`health` turns them into the status page's answer: a channel passes its own view of a running
connection where it has one, or `report`s it as it changes (a poller's or a long connection's
word on its last attempt).

A webhook channel's whole `start()` is `serve`: `inbound` held for the webhooks until the run
ends, the credentials checked meanwhile. A polling or long-connection channel's `start()` is
`run_until_stopped` (its work cancelled by `stop()`) or, where the platform wants a goodbye (an
offset confirmed, a webhook deleted), `run` with work that watches `stopping` and ends itself;
its `stop()` then waits for that at most a while (`stop_within`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import structlog

from bus import InboundSender
from channels.base import Channel
from channels.errors import AuthError, ChannelError, FatalChannelError
from channels.health import ChannelHealth
from channels.stopping import until_stopped

log = structlog.get_logger(__name__)


#: What a channel that is not receiving yet answers by default: not ready, `/readyz` waits.
NOT_RECEIVING_YET = ChannelHealth.starting("not receiving yet")


@dataclass(frozen=True, slots=True)
class CredentialsCheck:
    """How a channel checks its credentials, and how their refusal is told."""

    #: Calls the platform with the credentials; raises `refusal` when it refuses them (any
    #: other error is transient: the supervisor tries again).
    probe: Callable[[], Awaitable[object]]
    #: Who refused what, for the fatal error: "Slack refused the credentials".
    what: str
    channel: str
    refusal: type[ChannelError] = AuthError
    #: The operator's next step; None: the refusal's own suggestion.
    suggestion: str | None = None


class RunState:
    def __init__(
        self,
        health: ChannelHealth | None = None,
        *,
        not_receiving: ChannelHealth = NOT_RECEIVING_YET,
    ) -> None:
        self.stopping = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.receiving = asyncio.Event()
        self.fatal: FatalChannelError | None = None
        #: Set by `refused`: the credentials are dead, `receive_until` ends.
        self.dead = asyncio.Event()
        #: The gateway's sender while `serve` receives: what webhooks hand messages to.
        self.inbound: InboundSender | None = None
        #: The channel's own word on its connection (`report`), which `health` answers while
        #: the channel runs; None leaves it to `receiving`.
        self.reported = health
        #: What `health` answers, without a report, while not receiving.
        self.not_receiving = not_receiving

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The body of one `start()`: not idle while it runs, not receiving once it ends, and
        the fatal error that ended it recorded."""
        self.idle.clear()
        try:
            yield
        except FatalChannelError as error:
            if self.fatal is None:
                self.fatal = error
            raise
        finally:
            self.receiving.clear()
            self.idle.set()

    async def run(self, work: Coroutine[Any, Any, object]) -> None:
        """A `start()` whose `work` watches `stopping` itself and ends once it is set: nothing
        once stopped, otherwise `work` inside `running()`."""
        if self.stopping.is_set():
            work.close()
            return
        async with self.running():
            await work

    async def run_until_stopped(self, work: Coroutine[Any, Any, object], *, name: str) -> None:
        """`run`, with `work` a task named `name` that `stop()` cancels."""
        if self.stopping.is_set():
            work.close()
            return
        await self.run(until_stopped(work, self.stopping, name=name))

    def report(self, health: ChannelHealth) -> None:
        """The connection's new state (`health` answers it while the channel runs), unless it
        reported itself down before."""
        self.reported = health if self.reported is None else self.reported.then(health)

    async def receive_until(self, *, name: str) -> None:
        """Receiving (webhooks arrive meanwhile) until `stop()` or `refused` (the platform
        rejected the credentials); then the fatal error, if one was recorded, is raised."""
        self.receiving.set()
        await until_stopped(self.dead.wait(), self.stopping, name=name)
        if self.fatal is not None and not self.stopping.is_set():
            raise self.fatal

    async def serve(
        self, inbound: InboundSender, check: CredentialsCheck, *, task_name: str, path: str
    ) -> None:
        """A webhook channel's `start()`: nothing once stopped; `inbound` held as
        `self.inbound` for the webhooks on `path` at once, while `check` runs
        (`check_credentials`), until `stop()` or a refusal (`receive_until`, its watch task
        named `task_name`)."""
        if self.stopping.is_set():
            return
        async with self.running():
            # A channel starts once the journal is open: a signed webhook can be stored from
            # then on, and the platform is not kept waiting (or sent elsewhere by a load
            # balancer) while the credentials check takes its time.
            self.inbound = inbound
            try:
                await self.receive_while_checking(check, task_name=task_name)
                # Under the channel's own name (`twilio.receiving`), as its other events are.
                log.info(f"{check.channel}.receiving", path=path)
                await self.receive_until(name=task_name)
            finally:
                self.inbound = None

    async def receive_while_checking(self, check: CredentialsCheck, *, task_name: str) -> None:
        """Receiving from now on (the caller has handed its webhooks the sender) while `check`
        runs, as `check_credentials` runs it; returns once the credentials are checked or
        `stop()` is called."""
        self.receiving.set()
        checked = self.check_credentials(check)
        await until_stopped(checked, self.stopping, name=f"{task_name}:credentials")

    def receiver(self, channel: str) -> InboundSender:
        """The sender a webhook hands its message to; a `ChannelError` when not receiving."""
        if self.inbound is None:
            raise ChannelError(f"the {channel} channel is not receiving", channel=channel)
        return self.inbound

    async def check_credentials(self, check: CredentialsCheck) -> None:
        """Run `check.probe`; a `check.refusal` it raises is `refused` (with `check.what` and
        `check.suggestion`) and raised as that fatal error."""
        try:
            await check.probe()
        except check.refusal as error:
            raise self.refused(
                check.what, error, channel=check.channel, suggestion=check.suggestion
            ) from error

    def refused(
        self, what: str, error: ChannelError, *, channel: str, suggestion: str | None = None
    ) -> FatalChannelError:
        """The platform refused the credentials (`what`, e.g. "Slack refused the credentials",
        because of `error`): recorded as the fatal error that ends this run, and returned for
        the caller to raise. The suggestion is `error`'s unless one is given."""
        self.fatal = FatalChannelError(
            f"{what} ({error})",
            channel=channel,
            suggestion=error.suggestion if suggestion is None else suggestion,
        )
        self.dead.set()
        return self.fatal

    async def stop(self) -> None:
        """Ask `start()` to end and wait until it has (let go of its connections)."""
        self.stopping.set()
        await self.idle.wait()

    async def stop_within(self, wait_s: float, *, channel: str) -> None:
        """`stop()`, waiting at most `wait_s` for `start()`'s goodbye to the platform; past
        that, `<channel>.stop_timeout` is logged and the caller closes its clients anyway."""
        self.stopping.set()
        try:
            async with asyncio.timeout(wait_s):
                await self.idle.wait()
        except TimeoutError:
            log.warning(f"{channel}.stop_timeout", waited_s=wait_s)

    def ended(self) -> ChannelHealth | None:
        """Down after a fatal error or a stop; None while the channel may still run."""
        if self.fatal is not None:
            return ChannelHealth.down(str(self.fatal))
        if self.stopping.is_set():
            return ChannelHealth.down("stopped")
        return None

    def health(self, running: ChannelHealth | None = None) -> ChannelHealth:
        """`ended()`, otherwise `running`, else what was `report`ed, or by default healthy
        while receiving and `not_receiving` before."""
        if (ended := self.ended()) is not None:
            return ended
        if running is not None:
            return running
        if self.reported is not None:
            return self.reported
        if self.receiving.is_set():
            return ChannelHealth.healthy()
        return self.not_receiving


class RunStateChannel(Channel):
    """A channel whose life is one `RunState` (`self._run_state`, made here from `health`, its
    first report, and `not_receiving`): waiting until it receives and its health are the run
    state's. A subclass with more to say about a running connection `report`s it, or
    overrides `health_check` and passes its view to `RunState.health`."""

    def __init__(
        self,
        health: ChannelHealth | None = None,
        *,
        not_receiving: ChannelHealth = NOT_RECEIVING_YET,
    ) -> None:
        self._run_state = RunState(health, not_receiving=not_receiving)

    async def wait_receiving(self) -> None:
        """Return once the channel takes messages (tests and `doctor` wait on it)."""
        await self._run_state.receiving.wait()

    async def health_check(self) -> ChannelHealth:
        return self._run_state.health()

    async def stop(self) -> None:
        """Ask `start()` to end and wait until it has; safe to call twice. A channel with
        clients of its own overrides it: `await super().stop()`, then close them."""
        await self._run_state.stop()

    @asynccontextmanager
    async def _probing(self, close: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
        """The body of a `probe` that opens clients: probed outside `start()` (`doctor`),
        nothing else would close them, so `close` runs after it."""
        try:
            yield
        finally:
            if self._run_state.idle.is_set():
                await close()


# Single-poller channels run only under their lease: one active poller per bot account.
#
# `LeasedChannels` is the `RunChannel` a cluster's ingress gives its channel manager. A channel
# whose `single_poller` is True (Telegram long polling, IMAP) is started only while this process
# holds the lease of its bot account, and cancelled as soon as the lease is lost; every other
# channel starts at once, as in one process. The lease itself
# (`gateway.cluster.lease.PollerLease`, a JetStream KV key) is made by `lease_for`, so this
# layer knows nothing of NATS.
#
# The account is the profile's channel: a profile is one bot and has at most one channel of each
# name, and every ingress runs the same profiles. The key keeps both readable for operators
# (`nats kv ls`), escaping what a KV key may not contain.
#: A KV key is `[-/_=.A-Za-z0-9]+`; `.` separates the profile from the channel, `=` escapes.
_KEY_SAFE = re.compile(r"[A-Za-z0-9_-]")


class ChannelLease(Protocol):
    async def hold(
        self, run: Callable[[], Awaitable[None]], *, until: asyncio.Event | None = None
    ) -> None:
        """Run `run` while the lease is held, cancelling it when lost, until it returns;
        `until` ends a wait for the lease."""


#: Makes the lease for one key (the daemon binds the bucket, the holder id and the timings).
LeaseFor = Callable[[str], ChannelLease]


def lease_key(profile: str, channel: str) -> str:
    """The lease key of a profile's channel: `profile.channel`, other bytes as `=XX`."""
    return f"{_escaped(profile)}.{_escaped(channel)}"


def _escaped(part: str) -> str:
    return "".join(
        char if _KEY_SAFE.fullmatch(char) else "".join(f"={byte:02X}" for byte in char.encode())
        for char in part
    )


class LeasedChannels:
    def __init__(self, profile: str, lease_for: LeaseFor) -> None:
        self._profile = profile
        self._lease_for = lease_for

    async def __call__(
        self, channel: Channel, inbound: InboundSender, stopping: asyncio.Event
    ) -> None:
        if not channel.single_poller:
            await channel.start(inbound)
            return
        lease = self._lease_for(lease_key(self._profile, channel.name))
        # Stopping while still waiting ends the wait; a running channel ends by its own stop().
        await lease.hold(partial(channel.start, inbound), until=stopping)
