"""A bounded worker's sweep on real NATS: which partition it takes from next."""

from __future__ import annotations

import random
from collections import Counter

from nats.aio.client import Client

from gateway.cluster.pull import _partition_with_work
from gateway.cluster.streams import ensure_streams, ensure_worker_consumers, names_of
from tests.cluster.harness import nats_config


async def test_a_sweep_passes_over_held_and_empty_partitions_and_favours_the_fullest(
    nats_client: Client, nats_prefix: str
) -> None:
    config = nats_config(nats_prefix)  # 4 partitions
    names = names_of(config)
    js = nats_client.jetstream(timeout=10)
    await ensure_streams(js, config)
    await ensure_worker_consumers(js, config)
    # Partition 0 holds 1 message, 1 holds 9, 2 none, 3 two of which one is in flight.
    for partition, count in ((0, 1), (1, 9), (3, 2)):
        for number in range(count):
            await js.publish(names.inbound_subject(partition), f"{partition}.{number}".encode())
    held = await js.pull_subscribe_bind(
        durable=names.worker_consumer(3), stream=names.inbound_stream
    )
    (in_flight,) = await held.fetch(1, timeout=10)
    consumers = [(names.worker_consumer(p), names.inbound_subject(p)) for p in range(4)]
    random.seed(20261201)
    taken = Counter(
        [await _partition_with_work(js, names.inbound_stream, consumers) for _ in range(60)]
    )
    # Never an empty partition, nor one whose message is in flight (max_ack_pending 1) ...
    assert set(taken) == {names.worker_consumer(0), names.worker_consumer(1)}
    # ... and each waiting message as likely as another: the fuller partition, far more often.
    assert taken[names.worker_consumer(1)] > 3 * taken[names.worker_consumer(0)]
    await in_flight.ack_sync()
    assert await _partition_with_work(js, names.inbound_stream, consumers[3:]) == (
        names.worker_consumer(3)
    )
