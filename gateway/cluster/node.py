"""One process's place in the cluster: its NATS connection, streams, and what it runs.

A process has a role: `ingress` runs the channels (publishing what they receive, delivering
replies), `worker` runs the agents (answering inbound partitions), `all` both. The node
connects, creates the streams, its role's consumers and the lease bucket idempotently, follows
the status subject, opens the turn records (workers) and the delivery records (ingress
processes) and runs the worker's and the deliveries' loops (an ingress's with its live subject:
the turns it shows, `live_ingress`); profiles join and leave it as they start and stop
(SIGHUP reloads one at a time).

Processes are started together with NATS (docker compose does), and a fresh JetStream cluster
answers nothing until it has elected its meta leader: the node asks again, with backoff, until
`connect_timeout_s` after its start, and reports itself not ready until it has joined.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Callable, Iterable
from typing import Literal, Self, TypeVar

import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext
from prometheus_client import CollectorRegistry, Counter

from channels.retry import Backoff
from config.bus import NatsConfig
from config.store import StoreConfig
from gateway.cluster.connection import (
    NATS_ERRORS,
    REQUEST_TIMEOUT_S,
    BusUnavailable,
    connect,
    disconnect,
    jetstream_unsettled,
)
from gateway.cluster.delivery import Deliver, ReplyDelivery
from gateway.cluster.lease import PollerLeases, open_lease_bucket
from gateway.cluster.live_ingress import LiveChannels, LiveShows
from gateway.cluster.node_service import ClusterMetrics, StatusBoard, StatusPublisher
from gateway.cluster.profile_worker import ProfileWorker
from gateway.cluster.record_table import DeliveryRecords, RecordTable
from gateway.cluster.sends import ClusterOutbox, SendRecords
from gateway.cluster.streams import (
    ClusterNames,
    ensure_streams,
    ensure_worker_consumers,
    names_of,
)
from gateway.cluster.turn_records import TurnRecords
from gateway.cluster.worker import Worker

log = structlog.get_logger(__name__)

Role = Literal["all", "ingress", "worker"]
Table = TypeVar("Table", bound=RecordTable)

#: Seconds one JetStream request of the join waits: a cluster without a leader never answers,
#: and the join asks again rather than spend its whole `connect_timeout_s` on one request.
JOIN_REQUEST_TIMEOUT_S = 2.0
#: Pauses between the join's attempts.
JOIN_BACKOFF = Backoff(initial_s=0.25, max_s=2.0)


def process_id(role: str) -> str:
    """A name for this process that says where it runs; unique per start."""
    host = "".join(c if c.isalnum() or c == "-" else "-" for c in socket.gethostname())[:40]
    return f"{role}-{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class ClusterNode:
    def __init__(
        self,
        config: NatsConfig,
        store: StoreConfig,
        role: Role,
        registry: CollectorRegistry,
        reply_dead_letters: Counter,
    ) -> None:
        """`reply_dead_letters`: the process's count of replies kept as dead letters (the
        gateway's, shared with one process: `GatewayMetrics.reply_dead_letters`)."""
        self.config = config
        self.role: Role = role
        self.names: ClusterNames = names_of(config)
        self.id = process_id(role)
        self._store = store
        self.metrics = ClusterMetrics.create(registry)
        self.board = StatusBoard()
        self._client: Client | None = None
        self._js: JetStreamContext | None = None
        self._records: TurnRecords | None = None
        self._deliveries: DeliveryRecords | None = None
        self._sends: SendRecords | None = None
        self.worker: Worker | None = None
        self.delivery: ReplyDelivery | None = None
        self.live: LiveShows | None = None
        self._worker_profiles: dict[str, ProfileWorker] = {}
        #: Profiles this process is still opening: its worker takes no message until each runs
        #: or has failed to start (see `expect_worker_profiles`).
        self._opening_profiles: set[str] = set()
        self._profiles_opened = asyncio.Event()
        self._profiles_opened.set()
        self._registry = registry
        self._reply_dead_letters = reply_dead_letters
        #: An ingress's poller leases: its single-poller channels poll only while it holds one.
        self.leases: PollerLeases | None = None
        #: Set once its streams, consumers and records are all there: ready from then on.
        self._joined = False

    @property
    def runs_worker(self) -> bool:
        return self.role in ("all", "worker")

    @property
    def runs_ingress(self) -> bool:
        return self.role in ("all", "ingress")

    @property
    def client(self) -> Client:
        assert self._client is not None, "ClusterNode used outside `async with`"
        return self._client

    @property
    def js(self) -> JetStreamContext:
        assert self._js is not None, "ClusterNode used outside `async with`"
        return self._js

    async def __aenter__(self) -> Self:
        # One time limit for the connection and the join: "wait this long for NATS".
        deadline = asyncio.get_running_loop().time() + self.config.connect_timeout_s
        self._client = await connect(self.config, name=f"octos-gateway {self.id}")
        self._js = self._client.jetstream(timeout=REQUEST_TIMEOUT_S)
        try:
            await self._set_up_jetstream(deadline)
            await self._join()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        self._joined = True
        log.info("cluster.joined", node=self.id, role=self.role, nats=self.config.redacted_url)
        return self

    async def _set_up_jetstream(self, deadline: float) -> None:
        """The streams, this role's consumers and the lease bucket, asked for again while
        JetStream is unsettled, until `deadline`; `BusUnavailable` when it refuses or time is up.
        Every step is idempotent, so an attempt cut short is simply made again, by this process
        or by another started at the same time."""
        js = self.client.jetstream(timeout=JOIN_REQUEST_TIMEOUT_S)
        loop = asyncio.get_running_loop()
        failures = 0
        unsettled: BaseException | None = None
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    try:
                        await self._create_jetstream_objects(js)
                        return
                    except NATS_ERRORS as error:
                        if not jetstream_unsettled(error):
                            raise BusUnavailable(self.config, error) from error
                        unsettled = error
                    failures += 1
                    log.info(
                        "cluster.join_waiting",
                        detail="JetStream is not ready yet (a cluster still electing its "
                        "leader, or a stream another process is creating): asking again",
                        error=str(unsettled) or type(unsettled).__name__,
                        attempt=failures,
                        left_s=round(deadline - loop.time(), 1),
                    )
                    await asyncio.sleep(JOIN_BACKOFF.delay_s(failures))
        except TimeoutError as error:  # the deadline: nats-py's timeouts were caught above
            last = f" (last: {unsettled})" if unsettled is not None else ""
            cause = TimeoutError(
                f"JetStream not ready within bus.nats.connect_timeout_s "
                f"({self.config.connect_timeout_s:g} s){last}"
            )
            raise BusUnavailable(self.config, cause) from error

    async def _create_jetstream_objects(self, js: JetStreamContext) -> None:
        await ensure_streams(js, self.config)
        if self.runs_worker:
            await ensure_worker_consumers(js, self.config)
        if self.runs_ingress:
            # The delivery consumers are made per channel, as profiles start
            # (`ReplyDelivery.add_profile`).
            await open_lease_bucket(js, self.config.stream_prefix, replicas=self.config.replicas)

    async def _join(self) -> None:
        assert self._client is not None
        assert self._js is not None
        await self.board.follow(self._client, self.names.status_subject)
        # Every role takes the owner's sends (`/v1/messages` answers on any process).
        self._sends = await self._opened(SendRecords)
        if self.runs_worker:
            self._records = await self._opened(TurnRecords)
            self.worker = Worker(
                self._client,
                self._js,
                self.config,
                self._records,
                self._sends,
                self._worker_profiles.get,
                self._profiles_opened,
                StatusPublisher(self._client, self.names.status_subject, self.id),
                self.metrics,
            )
        if self.runs_ingress:
            self._deliveries = await self._opened(DeliveryRecords)
            self.live = LiveShows(self._client, self.names, self.id)
            self.delivery = ReplyDelivery(
                self._client,
                self._js,
                self.config,
                self.id,
                self._deliveries,
                self.metrics,
                self._reply_dead_letters,
                delivered_here=self.live.reply_delivered,
            )
            self.leases = await PollerLeases.open(
                self._js,
                self.config.stream_prefix,
                self._registry,
                replicas=self.config.replicas,
                holder=self.id,
            )

    async def _opened(self, table: type[Table]) -> Table:
        assert self._store.dsn is not None  # a nats bus requires store postgres
        opened = table(
            self._store.dsn.get_secret_value(),
            pool_size=self._store.pool_size,
            connect_timeout_s=self._store.connect_timeout_s,
        )
        await opened.open()
        return opened

    async def __aexit__(self, *exc_info: object) -> None:
        self._joined = False
        await self.board.unfollow()
        for table in (self._records, self._deliveries, self._sends):
            if table is not None:
                await table.close()
        if self._client is not None:
            await disconnect(self._client)

    def outbox(self, profile: str, *, knows_channel: Callable[[str], bool]) -> ClusterOutbox:
        """`profile`'s owner's sends, taken on this process."""
        assert self._sends is not None, "ClusterNode not joined"
        return ClusterOutbox(profile, self._sends, self.js, self.names, knows_channel=knows_channel)

    # Profiles join and leave

    def expect_worker_profiles(self, profiles: Iterable[str]) -> None:
        """The profiles this process is about to open. Its worker fetches nothing until each
        one runs (`add_worker_profile`) or failed to (`worker_profile_failed`): JetStream counts
        every delivery, and a message fetched for a profile still opening could only fail, using
        up one of its `max_deliver` attempts."""
        if not self.runs_worker:
            return
        self._opening_profiles.update(profiles)
        if self._opening_profiles:
            self._profiles_opened.clear()

    def _opened_profile(self, profile: str) -> None:
        self._opening_profiles.discard(profile)
        if not self._opening_profiles:
            self._profiles_opened.set()

    def add_worker_profile(self, profile: str, worker: ProfileWorker) -> None:
        self._worker_profiles[profile] = worker
        self._opened_profile(profile)

    def worker_profile_failed(self, profile: str) -> None:
        """A profile that could not open: the worker no longer waits for it."""
        self._opened_profile(profile)

    async def remove_worker_profile(self, profile: str) -> None:
        """No new message of `profile` starts here; those in hand finish first."""
        self._worker_profiles.pop(profile, None)
        if self.worker is not None:
            await self.worker.wait_idle(profile)

    def add_ingress_profile(
        self, profile: str, deliver: Deliver, live: LiveChannels, channels: Iterable[str]
    ) -> None:
        """`channels`: the names of the profile's channels, whose replies it delivers."""
        if self.delivery is not None:
            self.delivery.add_profile(profile, deliver, channels)
        if self.live is not None:
            self.live.add_profile(profile, live)

    async def reply_file(self, sha256: str) -> bytes | None:
        """The bytes of a reply's file its worker kept in the database, or None."""
        if self._deliveries is None:
            raise RuntimeError("reply_file() on a process without channels")
        return await self._deliveries.reply_file(sha256)

    def remove_ingress_profile(self, profile: str) -> None:
        if self.delivery is not None:
            self.delivery.remove_profile(profile)
        if self.live is not None:
            self.live.remove_profile(profile)

    # Running

    async def run_worker(self) -> None:
        if self.worker is not None:
            await self.worker.run()

    async def run_delivery(self) -> None:
        if self.delivery is not None and self.live is not None:
            # Open as long as replies are delivered: other ingress processes hand some here.
            async with self.live:
                await self.delivery.run()

    def stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    def stop_delivery(self) -> None:
        if self.delivery is not None:
            self.delivery.stop()

    # Readiness

    async def report(self) -> tuple[bool, dict[str, object]]:
        """Whether this process can do its part now, and what /readyz shows of it."""
        client = self._client
        nats_ok = client is not None and client.is_connected
        report: dict[str, object] = {
            "node": self.id,
            "role": self.role,
            "joined": self._joined,
            "nats": {"url": self.config.redacted_url, "connected": nats_ok},
            "running_turns": [
                {"task": turn.task_id, "worker": turn.worker} for turn in self.board.running()
            ],
        }
        ready = nats_ok and self._joined
        database = self._records or self._deliveries
        if database is not None:
            pg_ok = await database.ping()
            report["postgres"] = {"dsn": self._store.redacted_dsn, "connected": pg_ok}
            ready = ready and pg_ok
        return ready, report
