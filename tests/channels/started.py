"""A channel's `start()` as a task for a test: receiving inside the block, ended after it.

The platform test helpers (`running` for Telegram, `run_bot` for Discord, `run_slack`, the
LINE, Twilio, WhatsApp, QQ and WeCom fixtures) share this skeleton: start, wait until the
channel receives (`ready`, given the task so it can notice a `start()` that ended early), and on
the way out `stop()`, wait for `start()` to end and raise what it raised (a test that cancelled
it on purpose gets nothing). `started_on_bus` adds a real bus whose agent end the test reads
through `ReadsInbound`; `serving_webhooks` serves a webhook channel's routes as the daemon does
(`webhooks_started`, `webhooks_on_bus`: both at once; `receiving_webhooks`: that, ready once the
channel receives, as a `WebhookOnBus`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aiohttp import web

from bus import AgentHandle, InboundMessage, InboundSender, create_bus
from channels.base import Channel
from channels.lifecycle.run_state import RunStateChannel
from tests.fakes import LocalHttpServer

WAIT_S = 10.0

Fake = TypeVar("Fake")
ChannelT = TypeVar("ChannelT", bound=Channel)

Ready = Callable[[asyncio.Task[None]], Awaitable[None]]


@asynccontextmanager
async def started(
    channel: Channel, inbound: InboundSender, ready: Ready, *, name: str
) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(channel.start(inbound), name=name)
    try:
        async with asyncio.timeout(WAIT_S):
            await ready(task)
        yield task
    finally:
        await channel.stop()
        done, _ = await asyncio.wait({task}, timeout=WAIT_S)
    assert task in done, "start() did not end after stop()"
    if not task.cancelled() and (error := task.exception()) is not None:
        raise error


@asynccontextmanager
async def started_on_bus(
    channel: Channel, ready: Ready, *, name: str, capacity: int = 64
) -> AsyncIterator[tuple[AgentHandle, asyncio.Task[None]]]:
    """`started` with a fresh bus: yields the agent's end of it and the `start()` task."""
    agent, publisher = create_bus(capacity)
    sender = publisher.inbound_sender()
    try:
        async with started(channel, sender, ready, name=name) as task:
            yield agent, task
    finally:
        sender.close()


@asynccontextmanager
async def webhooks_started(
    channel: Channel, inbound: InboundSender, ready: Ready, *, name: str
) -> AsyncIterator[tuple[asyncio.Task[None], str]]:
    """`started` with the channel's webhook routes served (`serving_webhooks`): yields the
    `start()` task and the server's origin (http://127.0.0.1:PORT)."""
    async with (
        serving_webhooks(channel) as server,
        started(channel, inbound, ready, name=name) as task,
    ):
        yield task, server.origin


@asynccontextmanager
async def webhooks_on_bus(
    channel: Channel, ready: Ready, *, name: str, capacity: int = 64
) -> AsyncIterator[tuple[AgentHandle, asyncio.Task[None], str]]:
    """`started_on_bus` with the channel's webhook routes served (`serving_webhooks`): yields
    the agent's end, the `start()` task and the server's origin (http://127.0.0.1:PORT)."""
    async with (
        serving_webhooks(channel) as server,
        started_on_bus(channel, ready, name=name, capacity=capacity) as (agent, task),
    ):
        yield agent, task, server.origin


def once(receiving: Callable[[], Awaitable[None]]) -> Ready:
    """The `ready` that waits on one of the channel's own events (`channel.wait_receiving`)."""

    async def ready(_task: asyncio.Task[None]) -> None:
        await receiving()

    return ready


class ReadsInbound:
    """What a test reads from the agent's end of a running channel's bus."""

    agent: AgentHandle

    async def next_inbound(self, timeout_s: float = WAIT_S) -> InboundMessage:
        message = await asyncio.wait_for(self.agent.recv(), timeout_s)
        assert message is not None, "the bus closed"
        return message

    def queued_inbound(self) -> int:
        return self.agent.inbound_depth()


@dataclass
class OnBus(ReadsInbound, Generic[Fake, ChannelT]):
    """A channel started on a fresh bus (`started_on_bus`) against its platform's fake."""

    fake: Fake
    channel: ChannelT
    agent: AgentHandle


@dataclass
class WebhookOnBus(OnBus[Fake, ChannelT]):
    """A webhook channel receiving on a fresh bus (`receiving_webhooks`), its route at `url`."""

    url: str
    task: asyncio.Task[None]


Running = TypeVar("Running", bound="WebhookOnBus[Any, Any]")


@asynccontextmanager
async def receiving_webhooks(
    running: type[Running], fake: object, channel: RunStateChannel, path: str, *, name: str
) -> AsyncIterator[Running]:
    """`webhooks_on_bus`, ready once the channel receives: yields `running` (a `WebhookOnBus`
    of the platform's, with its own ways to post) for the route at `path`."""
    ready = once(channel.wait_receiving)
    async with webhooks_on_bus(channel, ready, name=name, capacity=16) as (agent, task, origin):
        yield running(fake, channel, agent, origin + path, task)


def serving_webhooks(channel: Channel) -> LocalHttpServer:
    """The channel's webhook routes on 127.0.0.1, as the daemon's HTTP server serves them."""
    app = web.Application()
    app.add_routes(channel.web_routes())
    return LocalHttpServer(app)
