"""What a node's two services on its NATS connection share: the worker and the reply delivery.

Each pulls its stream's messages through durable consumers (`Worker` the inbound stream,
`ReplyDelivery` the outbound one), keeps a record table in PostgreSQL (`cluster.record_table`)
and counts into the cluster's metrics; `stop()` ends their pulls, and what is in hand is
finished. What each does with a message is its own.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from nats.aio.client import Client
from nats.js import JetStreamContext

from cluster.metrics import ClusterMetrics
from cluster.record_table import RecordTable
from cluster.streams import names_of
from config.bus import NatsConfig

Records = TypeVar("Records", bound=RecordTable)


class NodeService(Generic[Records]):
    def __init__(
        self,
        client: Client,
        js: JetStreamContext,
        config: NatsConfig,
        records: Records,
        metrics: ClusterMetrics,
    ) -> None:
        # Its arguments kept one by one, as any constructor does (many in the project read alike).
        self._client = client
        self._js = js
        self._config = config
        self._names = names_of(config)
        self._records = records
        self._metrics = metrics
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Fetch no more; messages in hand are finished."""
        self._stopping.set()
