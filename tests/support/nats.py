"""JetStream streams of one test's own, on the NATS server at 127.0.0.1:4222.

`OCTOS_TEST_NATS` names the server. Each test gets a fresh stream prefix (so its streams,
subjects and consumers meet no other test's) and its streams are deleted afterwards. A missing
server fails the tests that need it, with the way to fix it: never a silent skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import nats
import pytest
from nats.aio.client import Client
from nats.js.errors import NotFoundError

NATS_URL = os.environ.get("OCTOS_TEST_NATS", "nats://127.0.0.1:4222")


def fresh_prefix() -> str:
    return f"T{secrets.token_hex(5).upper()}"


async def _client() -> Client:
    try:
        return await nats.connect(NATS_URL, connect_timeout=5, max_reconnect_attempts=0)
    except Exception as error:  # whatever the client raises, the test run cannot go on
        pytest.fail(
            f"NATS with JetStream is needed at {NATS_URL} (set OCTOS_TEST_NATS to another "
            f"URL): {error}; start it, e.g. `nats-server -js`",
            pytrace=False,
        )


async def delete_streams(prefix: str) -> None:
    client = await _client()
    try:
        js = client.jetstream()
        for suffix in ("IN", "OUT", "DEAD"):
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(f"{prefix}_{suffix}")
    finally:
        await client.close()


@pytest.fixture
async def nats_prefix() -> AsyncIterator[str]:
    """A stream prefix of this test's own; its streams are deleted afterwards."""
    prefix = fresh_prefix()
    await (await _client()).close()  # reachable, or the test fails here with the fix
    try:
        yield prefix
    finally:
        await delete_streams(prefix)


@pytest.fixture
async def nats_client() -> AsyncIterator[Client]:
    client = await _client()
    try:
        yield client
    finally:
        await client.close()


@dataclass(frozen=True)
class OwnStreams:
    """A test's own streams (`{prefix}_IN`, `_OUT`, `_DEAD`), read through `client`."""

    client: Client
    prefix: str

    async def left_in(self, suffix: str) -> int:
        """Messages still in the stream `{prefix}_{suffix}` (a work queue keeps only what is not
        done)."""
        info = await self.client.jetstream().stream_info(f"{self.prefix}_{suffix}")
        return info.state.messages

    async def left_once_settled(self, suffix: str, *, timeout_s: float) -> int:
        """What `left_in` settles at within `timeout_s`: a worker acks an inbound message only
        after its reply is published (and an ack lost to a kill comes again after `ack_wait_s`),
        so a reply can be seen just before its message leaves the stream. Asked again at every
        ack on the wire (every client's acks go to `$JS.ACK.…` subjects, which anyone may
        subscribe to) until the stream is empty or time is up; what is left then is the answer.
        """
        acks = await self.client.subscribe("$JS.ACK.>")
        try:
            left = await self.left_in(suffix)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    while left:
                        # The server applies an ack a moment after it is on the wire: the
                        # stream is read again shortly after the last ack too.
                        with contextlib.suppress(TimeoutError, nats.errors.TimeoutError):
                            await acks.next_msg(timeout=ACK_APPLIED_S)
                        left = await self.left_in(suffix)
            return left
        finally:
            await acks.unsubscribe()


#: How long after an ack on the wire the stream is read again if no other ack comes.
ACK_APPLIED_S = 0.1


@pytest.fixture
def streams(nats_client: Client, nats_prefix: str) -> OwnStreams:
    """The streams of this test's `nats_prefix`, read through its `nats_client`."""
    return OwnStreams(nats_client, nats_prefix)
