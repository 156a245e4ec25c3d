"""`PollerLease`: exactly one active poller per bot account across all ingress processes.

The lease is one key in a JetStream KV bucket (`{stream_prefix}_LEASES`). Its value names the
holder (`holder`, a fresh `term` for each acquisition, the holder's wall-clock `renewed_at` for
people reading the bucket); every write is compare-and-set on the key's revision: `create` takes
a free key, `update(last=revision)` renews it or takes it over, `delete(last=revision)` releases
it. NATS 2.9 has no per-key TTL, so the lease's time is kept by the processes themselves:

- the holder renews every `renew_s`. When it could not renew for `ttl_s - renew_s` (measured
  on its monotonic clock from the moment it *sent* its last confirmed renewal), or a renewal
  finds the key rewritten by someone else, the lease is lost: the poller is cancelled at once,
  leaving it one renew interval to wind down before any standby may start;
- a standby reads the key every `renew_s` and takes it over only once it has seen the *same
  revision* for `ttl_s` on its own monotonic clock. It never compares timestamps written by
  another machine, so clock skew between machines does not matter; what is assumed is only
  that clocks run at about the same rate over `ttl_s`, and that a holder is not frozen (VM
  pause, SIGSTOP) for longer than a renew interval without its renewer noticing before its
  poller runs again. nats-py does expose the server's timestamp of a stream message, but
  comparing it with a local clock would bring back the skew this rule avoids.

A holder that releases (clean stop) deletes the key, so a standby takes over within one renew
interval instead of waiting `ttl_s`.

`PollerLeases` binds what every lease of one ingress process is made with (the bucket, the holder
id and the gauge). An ingress makes it once at start-up and gives each profile's channel manager
`run_channel=leases.for_profile(profile)`; a single-poller channel then starts only while this
process holds its lease. The NATS connection is the caller's (the cluster's node owns it).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime

import nats.errors
import nats.js.errors
import structlog
from nats.js import JetStreamContext
from nats.js.kv import KeyValue
from prometheus_client import CollectorRegistry, Gauge

from channels.lifecycle.run_state import LeasedChannels
from channels.stopping import until_stopped

log = structlog.get_logger(__name__)

#: A lease's defaults, for a lease made alone and for those `PollerLeases` makes alike.
DEFAULT_TTL_S = 5.0
DEFAULT_RENEW_S = 1.0

#: JetStream's "wrong last sequence" error codes: the key's revision is not the one expected.
_WRONG_REVISION_CODES = frozenset({10071, 10164})
#: What "NATS unreachable or slow" looks like from nats-py (all its errors share the base).
_UNREACHABLE = (nats.errors.Error, OSError, TimeoutError)


def lease_bucket_name(stream_prefix: str) -> str:
    return f"{stream_prefix}_LEASES"


async def open_lease_bucket(
    js: JetStreamContext, stream_prefix: str, *, replicas: int = 1
) -> KeyValue:
    """The lease bucket, created on first use; any number of processes may race to create it."""
    bucket = lease_bucket_name(stream_prefix)
    try:
        return await js.key_value(bucket)
    except nats.js.errors.BucketNotFoundError:
        pass  # the first process here: create it below
    # Creating a stream that exists with the same settings succeeds, so a race is harmless.
    return await js.create_key_value(
        bucket=bucket,
        history=1,
        replicas=replicas,
        description="octos-gateway poller leases: one active poller per bot account",
    )


def held_leases_gauge(registry: CollectorRegistry) -> Gauge:
    """The gauge every lease of a process reports to; create it once per registry."""
    return Gauge(
        "octos_poller_leases_held",
        "1 while this process holds the poller lease of a bot account, else 0.",
        ("lease",),
        registry=registry,
    )


class LeaseLost(Exception):
    """The lease was taken over or could not be renewed in time."""


@dataclass(slots=True)
class _Term:
    """One acquisition of the lease: what this holder wrote, and when that was confirmed."""

    term: str
    revision: int
    #: Monotonic time at which the last confirmed write was sent (not answered: earlier is safe).
    confirmed_sent_at: float


@dataclass(eq=False, slots=True)
class PollerLease:
    kv: KeyValue
    key: str
    holder: str
    _: KW_ONLY
    ttl_s: float = DEFAULT_TTL_S
    renew_s: float = DEFAULT_RENEW_S
    gauge: Gauge | None = None
    #: Set while this holder holds the lease (tests wait on it).
    held: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def __post_init__(self) -> None:
        if not 0 < 2 * self.renew_s <= self.ttl_s:
            raise ValueError(
                f"lease ttl_s={self.ttl_s} must be at least twice renew_s={self.renew_s}: the "
                "holder stops its poller one renew interval before a standby may take over"
            )

    async def hold(
        self, run: Callable[[], Awaitable[None]], *, until: asyncio.Event | None = None
    ) -> None:
        """Run `run` whenever this process holds the lease, until `run` ends by itself.

        Waits to acquire the lease, runs `run` while renewing it, and cancels `run` as soon as
        the lease is lost, then waits again. Returns (after releasing the lease) when `run`
        returns; raises what `run` raises. Setting `until` ends a wait for the lease (not a
        running `run`: whoever set it stops that themselves).
        """
        stopping = until or asyncio.Event()
        while True:
            term = await until_stopped(self._acquire(), stopping, name=f"lease:{self.key}:wait")
            if term is None:
                return
            lost = False
            try:
                lost = not await self._run_while_held(run, term)
            finally:
                # A lost lease is not ours to delete; anything else (`run` returned or raised,
                # or we are cancelled) hands it on at once.
                if not lost:
                    await self._let_go(term)
            if not lost:
                return

    # -- holding --------------------------------------------------------------------------

    async def _run_while_held(self, run: Callable[[], Awaitable[None]], term: _Term) -> bool:
        """True when `run` ended by itself, False when the lease was lost first."""
        lost = asyncio.Event()

        async def call() -> None:
            await run()

        # Not a TaskGroup: it would wrap what `run` raises (a channel's fatal error) in a group.
        keeper = asyncio.create_task(self._keep(term, lost), name=f"lease:{self.key}:renew")
        finished = False
        try:
            await until_stopped(call(), lost, name=f"lease:{self.key}:run")
            finished = not lost.is_set()
        finally:
            keeper.cancel()
            await asyncio.wait({keeper})
        if not keeper.cancelled() and (crash := keeper.exception()) is not None:
            raise crash
        return finished

    async def _keep(self, term: _Term, lost: asyncio.Event) -> None:
        """Renew every `renew_s`; set `lost` when the lease is gone or cannot be kept."""
        try:
            while True:
                deadline = term.confirmed_sent_at + self.ttl_s - self.renew_s
                await asyncio.sleep(max(0.0, min(self.renew_s, deadline - time.monotonic())))
                await self._renew(term, deadline)
        except LeaseLost as exc:
            log.warning("lease.lost", key=self.key, holder=self.holder, reason=str(exc))
        finally:
            # Also when the renewer itself fails: a lease nobody renews must not be run under.
            self._set_held(False)
            lost.set()

    async def _renew(self, term: _Term, deadline: float) -> None:
        sent_at = time.monotonic()
        if sent_at >= deadline:
            raise LeaseLost(f"not renewed for {self.ttl_s - self.renew_s:g} s")
        try:
            async with asyncio.timeout(min(self.renew_s, deadline - sent_at)):
                try:
                    term.revision = await self.kv.update(
                        self.key, self._value(term.term), last=term.revision
                    )
                    term.confirmed_sent_at = sent_at
                except nats.js.errors.BadRequestError as exc:
                    if not _wrong_revision(exc):
                        raise
                    # Our own earlier write may have landed with its answer lost: adopt its
                    # revision (the deadline stays at the older confirmation: the safe side).
                    revision, holder = await self._owner(term)
                    if revision is None:
                        raise LeaseLost(f"taken over: {holder}") from exc
                    term.revision = revision
        except _UNREACHABLE as exc:
            log.warning("lease.renew_failed", key=self.key, error=f"{type(exc).__name__}: {exc}")

    async def _let_go(self, term: _Term) -> None:
        """Delete the key if it is still ours, so a standby need not wait out the lease."""
        self._set_held(False)
        try:
            async with asyncio.timeout(self.renew_s):
                revision, _holder = await self._owner(term)
                if revision is not None:
                    await self.kv.delete(self.key, last=revision)
                    log.info("lease.released", key=self.key, holder=self.holder)
        except _UNREACHABLE as exc:
            # Nothing is lost: a standby takes over once the lease has not been renewed for ttl_s.
            log.warning("lease.release_failed", key=self.key, error=f"{type(exc).__name__}: {exc}")

    # -- waiting --------------------------------------------------------------------------

    async def _acquire(self) -> _Term:
        """Wait until the key is free, or its holder has not renewed it for `ttl_s`; take it."""
        seen: tuple[int, float] | None = None  # (revision, when this process first saw it)
        reachable = True  # one warning when NATS goes away, not one a second
        while True:
            term = uuid.uuid4().hex
            sent_at = time.monotonic()
            try:
                entry = await self._entry()
                if entry is None:
                    revision = await self.kv.create(self.key, self._value(term))
                    return self._acquired(term, revision, sent_at, previous=None)
                revision, value = entry
                if seen is None or seen[0] != revision:
                    if seen is None:
                        log.info("lease.standby", key=self.key, holder=_holder_of(value))
                    seen = (revision, sent_at)
                elif sent_at - seen[1] >= self.ttl_s:
                    new_revision = await self.kv.update(self.key, self._value(term), last=revision)
                    return self._acquired(term, new_revision, sent_at, previous=_holder_of(value))
            except nats.js.errors.BadRequestError as exc:
                if not _wrong_revision(exc):
                    raise
                seen = None  # another standby was faster: watch the new holder
            except _UNREACHABLE as exc:
                report = log.warning if reachable else log.debug
                report("lease.unreachable", key=self.key, error=f"{type(exc).__name__}: {exc}")
                reachable = False
            else:
                reachable = True
            # No event tells of a holder's death: reading the key is the only way to see it.
            await asyncio.sleep(self.renew_s)

    def _acquired(self, term: str, revision: int, sent_at: float, previous: str | None) -> _Term:
        acquired = _Term(term, revision, sent_at)
        self._set_held(True)
        log.info("lease.acquired", key=self.key, holder=self.holder, taken_over_from=previous)
        return acquired

    # -- the key --------------------------------------------------------------------------

    async def _entry(self) -> tuple[int, bytes] | None:
        """The key's revision and value, or None while it is free (never written or deleted)."""
        try:
            async with asyncio.timeout(self.renew_s):
                entry = await self.kv.get(self.key)
        except nats.js.errors.KeyNotFoundError:
            return None
        if entry.revision is None:
            raise RuntimeError(f"KV entry {self.key!r} came without a revision")
        return entry.revision, entry.value or b""

    async def _owner(self, term: _Term) -> tuple[int | None, str]:
        """The key's revision if `term` still holds it (else None), and who holds it."""
        entry = await self._entry()
        if entry is None:
            return None, "the key is free"
        revision, value = entry
        return (revision if _term_of(value) == term.term else None), f"held by {_holder_of(value)}"

    def _value(self, term: str) -> bytes:
        renewed_at = datetime.now(UTC).isoformat(timespec="milliseconds")
        return json.dumps({"holder": self.holder, "term": term, "renewed_at": renewed_at}).encode()

    def _set_held(self, held: bool) -> None:
        if held:
            self.held.set()
        else:
            self.held.clear()
        if self.gauge is not None:
            self.gauge.labels(self.key).set(1 if held else 0)


def _wrong_revision(exc: nats.js.errors.BadRequestError) -> bool:
    return isinstance(exc, nats.js.errors.KeyWrongLastSequenceError) or (
        exc.err_code in _WRONG_REVISION_CODES
    )


def _decoded(value: bytes) -> dict[str, object]:
    try:
        decoded = json.loads(value)
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def _holder_of(value: bytes) -> str:
    return str(_decoded(value).get("holder", "an unknown holder"))


def _term_of(value: bytes) -> str | None:
    term = _decoded(value).get("term")
    return term if isinstance(term, str) else None


def default_holder() -> str:
    """Who holds a lease, as operators read it in the bucket: host, pid and a random tail
    (a restarted process with the same pid is another holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# What every lease of this process is made with, bound once; its defaults are the lease's own.
@dataclass(frozen=True, slots=True)
class PollerLeases:
    kv: KeyValue
    holder: str
    gauge: Gauge
    ttl_s: float = DEFAULT_TTL_S
    renew_s: float = DEFAULT_RENEW_S

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        stream_prefix: str,
        registry: CollectorRegistry,
        *,
        replicas: int = 1,
        holder: str | None = None,
    ) -> PollerLeases:
        """Once per process: the gauge is registered in `registry` here."""
        kv = await open_lease_bucket(js, stream_prefix, replicas=replicas)
        return cls(kv, holder or default_holder(), held_leases_gauge(registry))

    def lease(self, key: str) -> PollerLease:
        return PollerLease(
            self.kv, key, self.holder, ttl_s=self.ttl_s, renew_s=self.renew_s, gauge=self.gauge
        )

    def for_profile(self, profile: str) -> LeasedChannels:
        return LeasedChannels(profile, self.lease)
