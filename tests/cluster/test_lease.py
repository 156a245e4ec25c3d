"""`PollerLease` against the real NATS server: acquire, renew, release, takeover, loss.

Every test has a bucket of its own (removed afterwards) and waits on events with generous
timeouts; none asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import nats.js.errors
import pytest
from nats.js.kv import KeyValue
from prometheus_client import CollectorRegistry

from bench.lease_holder import HolderProcess
from gateway.cluster.lease import PollerLease, held_leases_gauge
from tests.support.nats_leases import LeaseBucket, bucket_view, lease_bucket
from tests.support.tcp_proxy import tcp_proxy

KEY = "p1.telegram"
WAIT_S = 60.0


@pytest.fixture
async def bucket() -> AsyncIterator[LeaseBucket]:
    async with lease_bucket() as created:
        yield created


async def _revisions(kv: KeyValue, key: str, count: int) -> list[int]:
    """The next `count` revisions written to `key`, as a watcher sees them."""
    watcher = await kv.watch(key)
    seen: list[int] = []
    try:
        async with asyncio.timeout(WAIT_S):
            async for entry in watcher:
                if entry is not None and entry.revision is not None:
                    seen.append(entry.revision)
                if len(seen) >= count:
                    return seen
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves it unannotated
    return seen


async def test_holder_acquires_renews_and_releases(bucket: LeaseBucket) -> None:
    registry = CollectorRegistry()
    lease = PollerLease(
        bucket.kv, KEY, "ingress-1", ttl_s=3.0, renew_s=0.5, gauge=held_leases_gauge(registry)
    )
    polling, done = asyncio.Event(), asyncio.Event()

    async def poll() -> None:
        polling.set()
        await done.wait()

    async with asyncio.TaskGroup() as group:
        holding = group.create_task(lease.hold(poll), name="holder")
        async with asyncio.timeout(WAIT_S):
            await polling.wait()
        assert lease.held.is_set()
        assert registry.get_sample_value("octos_poller_leases_held", {"lease": KEY}) == 1
        entry = await bucket.kv.get(KEY)
        assert json.loads(entry.value or b"")["holder"] == "ingress-1"
        revisions = await _revisions(bucket.kv, KEY, 3)
        assert revisions == sorted(set(revisions)), "each renewal is a new revision"
        done.set()
        await holding
    assert not lease.held.is_set()
    assert registry.get_sample_value("octos_poller_leases_held", {"lease": KEY}) == 0
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await bucket.kv.get(KEY)


async def test_standby_takes_over_at_once_when_the_holder_releases(bucket: LeaseBucket) -> None:
    # A lease time far beyond the wait: only the release can hand the lease over in time.
    first = PollerLease(bucket.kv, KEY, "ingress-1", ttl_s=600.0, renew_s=0.5)
    async with bucket_view(bucket) as other_kv:
        second = PollerLease(other_kv, KEY, "ingress-2", ttl_s=600.0, renew_s=0.5)
        first_polling, first_done, second_polling = (
            asyncio.Event(),
            asyncio.Event(),
            asyncio.Event(),
        )

        async def first_poll() -> None:
            first_polling.set()
            await first_done.wait()

        async def second_poll() -> None:
            assert not first.held.is_set(), "two pollers at once"
            second_polling.set()

        async with asyncio.timeout(WAIT_S), asyncio.TaskGroup() as group:
            group.create_task(first.hold(first_poll), name="first")
            await first_polling.wait()
            standby = group.create_task(second.hold(second_poll), name="second")
            # The holder renews once more with the standby waiting beside it.
            await _revisions(other_kv, KEY, 2)
            assert not second_polling.is_set()
            first_done.set()
            await standby
        assert second_polling.is_set()


async def test_standby_takes_over_from_a_killed_holder_process(bucket: LeaseBucket) -> None:
    holder = HolderProcess(bucket.url, bucket.prefix, KEY, "doomed", ttl_s=3.0)
    await holder.start()
    try:
        await holder.wait_polling()
        standby = PollerLease(bucket.kv, KEY, "standby", ttl_s=3.0, renew_s=0.6)
        polling = asyncio.Event()

        async def poll() -> None:
            polling.set()

        async with asyncio.TaskGroup() as group:
            waiting = group.create_task(standby.hold(poll), name="standby")
            await _revisions(bucket.kv, KEY, 2)  # the killed holder was renewing
            await holder.kill()
            async with asyncio.timeout(WAIT_S):
                await waiting
        assert polling.is_set()
    finally:
        await holder.kill()


async def test_holder_that_loses_the_lease_stops_polling_and_waits_again(
    bucket: LeaseBucket,
) -> None:
    lease = PollerLease(bucket.kv, KEY, "ingress-1", ttl_s=2.0, renew_s=0.4)
    runs: list[str] = []
    polling, stopped, second_run = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def poll() -> None:
        runs.append("start")
        if len(runs) > 1:
            second_run.set()
            return
        polling.set()
        try:
            await asyncio.Event().wait()
        finally:
            runs.append("stopped")
            stopped.set()

    async with asyncio.timeout(WAIT_S), asyncio.TaskGroup() as group:
        holding = group.create_task(lease.hold(poll), name="holder")
        await polling.wait()
        # Another process writes the key: the holder's next renewal finds it taken.
        await bucket.kv.put(KEY, json.dumps({"holder": "intruder", "term": "x"}).encode())
        await stopped.wait()
        assert not lease.held.is_set()
        assert not second_run.is_set()
        # The intruder goes away (deletes its key): the holder acquires it again.
        await bucket.kv.delete(KEY)
        await second_run.wait()
        await holding
    assert runs == ["start", "stopped", "start"]


async def test_holder_cut_off_from_nats_stops_polling_before_a_standby_starts(
    bucket: LeaseBucket,
) -> None:
    host, port = urlsplit(bucket.url).hostname or "127.0.0.1", urlsplit(bucket.url).port or 4222
    exclusive = _Exclusive()
    cut_off_stopped, standby_polling = asyncio.Event(), asyncio.Event()

    async def cut_off_poll() -> None:
        exclusive.enter("cut-off")
        try:
            await asyncio.Event().wait()
        finally:
            exclusive.leave("cut-off")
            cut_off_stopped.set()

    async def standby_poll() -> None:
        exclusive.enter("standby")
        exclusive.leave("standby")
        standby_polling.set()

    async with (
        tcp_proxy(host, port) as proxy,
        bucket_view(bucket, f"nats://127.0.0.1:{proxy.port}") as kv,
    ):
        cut_off = PollerLease(kv, KEY, "cut-off", ttl_s=2.0, renew_s=0.4)
        standby = PollerLease(bucket.kv, KEY, "standby", ttl_s=2.0, renew_s=0.4)
        async with asyncio.timeout(WAIT_S), asyncio.TaskGroup() as group:
            holding = group.create_task(cut_off.hold(cut_off_poll), name="cut-off")
            await cut_off.held.wait()
            waiting = group.create_task(standby.hold(standby_poll), name="standby")
            await proxy.cut()
            await cut_off_stopped.wait()
            await waiting
            holding.cancel()
    assert exclusive.runs == ["cut-off", "standby"]


class _Exclusive:
    """Fails loudly when two holders run their poller at the same moment."""

    def __init__(self) -> None:
        self.active: str | None = None
        self.runs: list[str] = []

    def enter(self, holder: str) -> None:
        assert self.active is None, f"{holder} started while {self.active} was polling"
        self.active = holder
        self.runs.append(holder)

    def leave(self, holder: str) -> None:
        assert self.active == holder
        self.active = None


@pytest.mark.slow
async def test_never_two_pollers_at_once_under_releases_and_takeovers(
    bucket: LeaseBucket,
) -> None:
    """Three holders, each on its own connection, hand the lease around by releasing it and
    by having it taken from them (the key overwritten), many times: never two at once."""
    exclusive = _Exclusive()
    enough = asyncio.Event()
    turns = 12
    names = ("a", "b", "c")

    async def contend(name: str, kv: KeyValue) -> None:
        lease = PollerLease(kv, KEY, name, ttl_s=1.5, renew_s=0.3)

        async def poll() -> None:
            exclusive.enter(name)
            try:
                turn = len(exclusive.runs)
                if turn >= turns:
                    enough.set()
                if turn % 3 == 0:
                    # Taken from this holder: overwrite the key and keep polling until stopped.
                    await kv.put(KEY, json.dumps({"holder": "thief", "term": "t"}).encode())
                    await asyncio.Event().wait()
                # Otherwise poll through one renewal, then stop cleanly (release).
                await _revisions(kv, KEY, 1)
            finally:
                exclusive.leave(name)

        while not enough.is_set():
            await lease.hold(poll, until=enough)

    async with asyncio.timeout(WAIT_S * 3):
        views = [bucket_view(bucket) for _ in names]
        kvs = [await view.__aenter__() for view in views]
        try:
            async with asyncio.TaskGroup() as group:
                for name, kv in zip(names, kvs, strict=True):
                    group.create_task(contend(name, kv), name=f"contender:{name}")
        finally:
            for view in views:
                await view.__aexit__(None, None, None)
    assert len(exclusive.runs) >= turns
    assert len(set(exclusive.runs)) > 1, "the lease never changed hands"
