"""A worker in the test's process, on real NATS and PostgreSQL, and what the test sees of it.

`Observer` subscribes (core NATS) to everything under the test's prefix and to the inbound
stream's acknowledgement subjects: JetStream's messages are ordinary NATS messages too, so a
test waits on the reply or the ack itself, never on a timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import PubAck
from prometheus_client import CollectorRegistry

from bus import InboundMessage
from config import ProfileConfig
from config.bus import NatsConfig
from config.store import StoreConfig
from gateway.cluster.codec import InboundEnvelope, platform_id
from gateway.cluster.node_service import ClusterMetrics, StatusPublisher
from gateway.cluster.profile_worker import ProfileWorker, worker_profile
from gateway.cluster.sends import SendRecords
from gateway.cluster.streams import (
    ClusterNames,
    ensure_delivery_consumers,
    ensure_streams,
    names_of,
)
from gateway.cluster.turn_records import TurnRecords
from gateway.cluster.worker import Worker
from gateway.metrics import GatewayMetrics
from tests.support.nats import NATS_URL

WAIT_S = 20.0


@dataclass(frozen=True, slots=True)
class Seen:
    subject: str
    data: bytes
    headers: dict[str, str]


class Observer:
    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self._changed = asyncio.Condition()

    async def on_message(self, msg: Msg) -> None:
        async with self._changed:
            self.seen.append(Seen(msg.subject, msg.data, dict(msg.headers or {})))
            self._changed.notify_all()

    def on(self, prefix: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.subject.startswith(prefix)]

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        async def until() -> None:
            async with self._changed:
                await self._changed.wait_for(condition)

        await asyncio.wait_for(until(), timeout_s)


@dataclass
class RunningWorker:
    js: JetStreamContext
    names: ClusterNames
    config: NatsConfig
    records: TurnRecords
    observer: Observer
    metrics: ClusterMetrics
    profile: str

    async def publish(
        self,
        message: InboundMessage,
        *,
        request: bool = False,
        msg_id: str | None = None,
        reply_subject: str | None = None,
        ingress: str | None = None,
        streams: bool = False,
        shows_typing: bool = False,
    ) -> PubAck:
        """As an ingress publishes it; `ingress` (with what its channel shows) gets the live
        events of the message's turn."""
        inbound_id = platform_id(self.profile, message) or "no-id"
        envelope = InboundEnvelope(
            self.profile,
            inbound_id,
            message,
            request=request,
            reply_subject=reply_subject,
            ingress=ingress,
            streams=streams,
            shows_typing=shows_typing,
        )
        partition = self.names.partition_of_chat(self.profile, message)
        return await self.js.publish(
            self.names.inbound_subject(partition),
            envelope.body(),
            headers=envelope.headers(msg_id or inbound_id),
        )

    async def publish_until_acked(
        self, message: InboundMessage, *, msg_id: str | None = None
    ) -> PubAck:
        """`publish`, then wait until the worker has acked one message more than before (the
        test's own, when every earlier message it published was acked already)."""
        acked = len(self.acks()) + 1
        ack = await self.publish(message, msg_id=msg_id)
        await self.observer.wait_for(lambda: len(self.acks()) == acked)
        return ack

    def replies(self) -> list[Seen]:
        return self.observer.on(f"{self.names.prefix}.out.") + self.observer.on(
            f"{self.names.prefix}.reply."
        )

    def acks(self, kind: bytes = b"+ACK") -> list[Seen]:
        """Acknowledgements of inbound messages of one kind (an empty body is an ack)."""
        return [s for s in self.observer.on("$JS.ACK.") if (s.data or b"+ACK").startswith(kind)]

    async def stream_count(self, stream: str) -> int:
        info = await self.js.stream_info(stream)
        return info.state.messages

    async def stream_emptied(self, stream: str, timeout_s: float = WAIT_S) -> int:
        """The stream's count once it is 0, or at the timeout: the server applies an ack the
        observer has seen a moment later, so a count read at once can still include it."""
        for _ in range(int(timeout_s / 0.05)):
            if await self.stream_count(stream) == 0:
                return 0
            # Polled: JetStream tells no one when a stream's count changes.
            await asyncio.sleep(0.05)
        return await self.stream_count(stream)


def nats_config(prefix: str, **overrides: Any) -> NatsConfig:
    settings: dict[str, Any] = {"url": NATS_URL, "stream_prefix": prefix, "partitions": 4}
    settings.update(overrides)
    return NatsConfig.model_validate(settings)


@asynccontextmanager
async def running_worker(
    client: Client,
    prefix: str,
    dsn: str,
    profile: str,
    tmp_path: Path,
    *,
    agent: dict[str, Any] | None = None,
    profiles_opened: asyncio.Event | None = None,
    **nats_overrides: Any,
) -> AsyncIterator[RunningWorker]:
    """A worker running `profile`; with `profiles_opened`, the profile counts as still opening
    (the worker does not find it, as a process's worker does not) until that event is set."""
    config = nats_config(prefix, **nats_overrides)
    names = names_of(config)
    js = client.jetstream(timeout=10)
    await ensure_streams(js, config)
    # As an ingress makes them: a turn streams only once its partition's replies are delivered.
    await ensure_delivery_consumers(js, config, "telegram")
    observer = Observer()
    await client.subscribe(f"{prefix}.>", cb=observer.on_message)
    await client.subscribe(f"$JS.ACK.{names.inbound_stream}.>", cb=observer.on_message)
    records = TurnRecords(dsn)
    await records.open()
    sends = SendRecords(dsn)
    await sends.open()
    registry = CollectorRegistry()
    metrics = ClusterMetrics.create(registry)
    profile_config = ProfileConfig.model_validate({"agent": agent or {"type": "echo"}})
    store = StoreConfig.model_validate({"backend": "postgres", "dsn": dsn})
    try:
        async with worker_profile(
            profile, profile_config, tmp_path, store, GatewayMetrics.create(registry)
        ) as answering:
            opened = profiles_opened or opened_profiles()

            def runs(name: str) -> ProfileWorker | None:
                return answering if opened.is_set() and name == profile else None

            worker = Worker(
                client,
                js,
                config,
                records,
                sends,
                runs,
                opened,
                StatusPublisher(client, names.status_subject, "test-worker"),
                metrics,
            )
            running = RunningWorker(js, names, config, records, observer, metrics, profile)
            async with asyncio.TaskGroup() as tasks:
                task = tasks.create_task(worker.run(), name="test-worker")
                yield running
                worker.stop()
                await task
    finally:
        await sends.close()
        await records.close()


def opened_profiles() -> asyncio.Event:
    """The worker's gate when every profile it runs is open from the start."""
    opened = asyncio.Event()
    opened.set()
    return opened
