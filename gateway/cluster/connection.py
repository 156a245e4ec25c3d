"""Connecting to NATS, and the one error an unreachable server becomes (exit 69 at start-up)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.js.errors import APIError, ServiceUnavailableError
from nats.js.errors import Error as JetStreamError

from config.bus import NatsConfig

log = structlog.get_logger(__name__)

#: Seconds a JetStream API call or a publish may take before it counts as failed.
REQUEST_TIMEOUT_S = 10.0
#: Every failure of NATS or of the way to it.
NATS_ERRORS = (OSError, TimeoutError, NatsError, JetStreamError)
#: JetStream error codes that pass once a cluster has formed: "JetStream system temporarily
#: unavailable" (no meta leader yet), "insufficient resources" and "no suitable peers for
#: placement" (the servers that would hold the replicas have not reported in yet).
_UNSETTLED_CODES = frozenset({10008, 10023, 10005})


class BusUnavailable(RuntimeError):
    """NATS (or its JetStream) cannot be reached; the message names the URL without a password."""

    def __init__(self, config: NatsConfig, cause: BaseException) -> None:
        self.url = config.redacted_url
        self.detail = str(cause).strip() or type(cause).__name__
        self.fix = (
            "check that nats-server runs there with JetStream enabled (-js, or `jetstream {}` "
            "in its config) and accepts TCP connections from this host, and that "
            "gateway.yaml's bus.nats.url (user, password) is right"
        )
        super().__init__(f"cannot use NATS at {self.url}: {self.detail}; {self.fix}")


def jetstream_unsettled(error: BaseException) -> bool:
    """Whether `error` is JetStream not answering yet rather than refusing: what a cluster
    says (or leaves unanswered) while it elects its meta leader, worth asking again."""
    if isinstance(error, TimeoutError | NoRespondersError | ServiceUnavailableError):
        return True  # nats-py's own TimeoutError is a TimeoutError too
    return isinstance(error, APIError) and error.err_code in _UNSETTLED_CODES


async def _log_error(error: Exception) -> None:
    log.warning("nats.error", error=str(error) or type(error).__name__)


async def connect(config: NatsConfig, *, name: str) -> Client:
    """A connection to the configured servers; `BusUnavailable` when none answers."""
    client = Client()

    async def disconnected() -> None:
        if not (client.is_closed or client.is_draining):  # our own close says nothing
            log.warning("nats.disconnected", url=config.redacted_url)

    async def reconnected() -> None:
        log.info("nats.reconnected", url=config.redacted_url)

    try:
        # Once connected it reconnects forever; the first connection must come within the
        # timeout (nats-py would otherwise retry an absent server forever).
        async with asyncio.timeout(config.connect_timeout_s):
            await client.connect(
                servers=config.servers,
                name=name,
                connect_timeout=int(max(1.0, config.connect_timeout_s)),
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=1,
                error_cb=_log_error,
                disconnected_cb=disconnected,
                reconnected_cb=reconnected,
            )
    except NATS_ERRORS as error:
        await client.close()
        if isinstance(error, TimeoutError):
            error = TimeoutError(f"no answer within {config.connect_timeout_s:g} s")
        raise BusUnavailable(config, error) from error
    return client


@asynccontextmanager
async def connected(config: NatsConfig, *, name: str) -> AsyncIterator[Client]:
    """The connection, drained and closed on the way out."""
    client = await connect(config, name=name)
    try:
        yield client
    finally:
        await disconnect(client)


async def disconnect(client: Client) -> None:
    """Drain (what was published is flushed, subscriptions end), or close when that fails."""
    if client.is_closed:
        return
    try:
        await client.drain()
    except NATS_ERRORS as error:
        log.warning("nats.drain_failed", error=str(error))
        await client.close()


async def check_bus(config: NatsConfig) -> None:
    """Reach NATS and its JetStream; `BusUnavailable` when either is missing."""
    async with connected(config, name="octos-gateway-check") as client:
        try:
            await client.jetstream(timeout=REQUEST_TIMEOUT_S).account_info()
        except NATS_ERRORS as error:
            raise BusUnavailable(config, error) from error
