"""Channel managers in several "processes" (each its own NATS connection) under poller leases:
a single-poller channel receives in one of them at a time; the others start every channel."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import ClassVar

import pytest
from nats.js.kv import KeyValue
from prometheus_client import CollectorRegistry

from bus import InboundSender, create_bus
from channels.lifecycle.run_state import lease_key
from channels.outbound.manager import ChannelManager
from gateway.cluster.lease import PollerLeases, held_leases_gauge
from tests.channels.recording import RecordingChannel
from tests.support.nats_leases import LeaseBucket, bucket_view, connect, lease_bucket

WAIT_S = 60.0
PROFILE = "sales bot"


class PollingChannel(RecordingChannel):
    """A channel that must poll in one process only, and checks that it does."""

    active: ClassVar[set[str]] = set()

    def __init__(self, process: str) -> None:
        super().__init__("telegram")
        self.process = process
        self.polling = asyncio.Event()

    @property
    def single_poller(self) -> bool:
        return True

    async def start(self, inbound: InboundSender) -> None:
        assert not PollingChannel.active, f"{self.process} polls beside {PollingChannel.active}"
        PollingChannel.active.add(self.process)
        self.polling.set()
        try:
            await super().start(inbound)
        finally:
            PollingChannel.active.discard(self.process)
            self.polling.clear()


class Process:
    """One ingress: a channel manager with a polling channel and a webhook-like channel."""

    def __init__(self, name: str, kv: KeyValue, registry: CollectorRegistry) -> None:
        self.name = name
        self.poller = PollingChannel(name)
        self.webhook = RecordingChannel("api")
        started = asyncio.Event()
        self.webhook_started = started
        self.webhook._on_start = started.set
        _agent, publisher = create_bus(16)
        self.manager = ChannelManager(
            PROFILE,
            publisher,
            # A stop that waited for the grace would fail the test by its timeout.
            stop_grace_s=600.0,
            run_channel=PollerLeases(
                kv, name, held_leases_gauge(registry), ttl_s=600.0, renew_s=0.5
            ).for_profile(PROFILE),
        )
        self.manager.register(self.poller)
        self.manager.register(self.webhook)


@pytest.fixture
async def bucket() -> AsyncIterator[LeaseBucket]:
    async with lease_bucket() as created:
        yield created


def test_lease_key_keeps_profile_and_channel_readable() -> None:
    assert lease_key("sales", "telegram") == "sales.telegram"
    assert lease_key("sales bot", "telegram") == "sales=20bot.telegram"
    assert lease_key("ventes.é", "email") == "ventes=2E=C3=A9.email"
    assert lease_key("a=b", "c") != lease_key("a", "b=c")


async def test_one_process_polls_and_a_standby_takes_over_when_it_stops(
    bucket: LeaseBucket,
) -> None:
    async with AsyncExitStack() as stack:
        kvs = [await stack.enter_async_context(bucket_view(bucket)) for _ in range(3)]
        registries = [CollectorRegistry() for _ in kvs]
        processes = [
            Process(name, kv, registry)
            for name, kv, registry in zip("ABC", kvs, registries, strict=True)
        ]
        async with asyncio.timeout(WAIT_S), asyncio.TaskGroup() as group:
            running = {
                p.name: group.create_task(p.manager.run(), name=f"manager:{p.name}")
                for p in processes
            }
            # Every process serves its webhook channel at once; one of them polls.
            for process in processes:
                await process.webhook_started.wait()
            waiters = [asyncio.create_task(p.poller.polling.wait()) for p in processes]
            _done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for waiter in pending:
                waiter.cancel()
            await asyncio.wait(waiters)
            holder = next(p for p in processes if p.poller.polling.is_set())
            standbys = [p for p in processes if p is not holder]
            gauges = [
                r.get_sample_value("octos_poller_leases_held", {"lease": "sales=20bot.telegram"})
                for r in registries
            ]
            assert sorted(g or 0 for g in gauges) == [0, 0, 1]
            # A standby that stops while waiting for the lease stops at once.
            await standbys[0].manager.stop()
            await running[standbys[0].name]
            assert not standbys[0].poller.of("start")
            # The holder stops cleanly: it releases, and the last process polls.
            await holder.manager.stop()
            await standbys[1].poller.polling.wait()
            await standbys[1].manager.stop()
        assert [len(p.poller.of("start")) for p in (holder, *standbys)] == [1, 0, 1]


async def test_poller_leases_open_the_existing_bucket(bucket: LeaseBucket) -> None:
    connection = await connect()
    try:
        leases = await PollerLeases.open(connection.jetstream(), bucket.prefix, CollectorRegistry())
        await bucket.kv.put("sales.email", b"{}")
        assert (await leases.kv.get("sales.email")).value == b"{}"
        host, pid, _tail = leases.holder.split(":")
        assert (host, pid) == (socket.gethostname(), str(os.getpid()))
        assert leases.lease("sales.email").holder == leases.holder
    finally:
        await connection.close()
