"""A lease bucket of the test's own on the NATS server at 127.0.0.1:4222.

`OCTOS_TEST_NATS` names the server. Each bucket gets a random stream prefix and is deleted at
the end. A missing server fails the test that needs it, saying how to fix it: never a skip.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from gateway.cluster.lease import lease_bucket_name, open_lease_bucket

NATS_URL = os.environ.get("OCTOS_TEST_NATS", "nats://127.0.0.1:4222")


@dataclass(frozen=True, slots=True)
class LeaseBucket:
    url: str
    prefix: str
    kv: KeyValue


async def connect(url: str = NATS_URL) -> Client:
    try:
        return await nats.connect(url, connect_timeout=5)
    except (OSError, nats.errors.Error) as error:
        pytest.fail(
            f"NATS with JetStream is needed at {url} (set OCTOS_TEST_NATS to another server): "
            f"{type(error).__name__}: {error}; start it, e.g. `nats-server -js`",
            pytrace=False,
        )


@asynccontextmanager
async def lease_bucket() -> AsyncIterator[LeaseBucket]:
    prefix = f"OCTOSTEST{secrets.token_hex(4).upper()}"
    connection = await connect()
    js = connection.jetstream()
    try:
        yield LeaseBucket(NATS_URL, prefix, await open_lease_bucket(js, prefix))
    finally:
        await js.delete_key_value(lease_bucket_name(prefix))
        await connection.close()


@asynccontextmanager
async def bucket_view(bucket: LeaseBucket, url: str | None = None) -> AsyncIterator[KeyValue]:
    """The same bucket over a connection of its own (to `url`: a proxy), as another process
    would see it."""
    connection = await connect(url or bucket.url)
    try:
        yield await open_lease_bucket(connection.jetstream(), bucket.prefix)
    finally:
        # A connection a test cut off cannot say goodbye: its socket is gone.
        with suppress(ConnectionError):
            await connection.close()
