"""One profile's channel side in a cluster ingress process: receive, publish, deliver.

The channels run as in one process (supervised, webhooks mounted, pairing), but their intake is
`ClusterIntake` (the platform is acknowledged after JetStream's publish ack) and the replies come
from the outbound stream: the node's delivery loops hand each one to `deliver`, which sends it
with this profile's channel manager. Notices that are not answers (a stranger's "your id is")
stay in the process, on a local bus to the same manager.

Polling channels (Telegram long polling, IMAP) have one poller per bot across ingress processes:
the channel manager starts a single-poller channel only while this process holds its lease
(`cluster.poller_leases`), so a standby ingress takes over when the holder dies.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import structlog

from bus import OutboundMessage, create_bus
from channels.errors import DeliveryError
from channels.health import ChannelHealth
from channels.manager import ChannelManager
from channels.metrics import ChannelMetrics
from channels.supervisor import start_channel
from cluster.delivery import Delivered
from cluster.ingress_intake import ClusterIntake
from cluster.node import ClusterNode
from config import ProfileConfig
from gateway.history import ProfileHistory
from gateway.pairing import Pairing
from gateway.profile_channels import build_channels, register_all
from gateway.services import ProcessServices
from gateway.strangers import StrangerNotices
from sessions import SessionManager
from sessions.backends import active_topics, session_store

log = structlog.get_logger(__name__)


class IngressProfile:
    # Takes what `ClusterProfileRuntime` takes, on purpose: that runtime builds it from its own.

    def __init__(
        self, profile_id: str, config: ProfileConfig, shared: ProcessServices, node: ClusterNode
    ) -> None:
        self.profile_id = profile_id
        self._config = config
        self._root = shared.data_dir / profile_id
        self._shared = shared
        self._node = node
        self._channels: ChannelManager | None = None

    async def health(self) -> dict[str, ChannelHealth]:
        return {} if self._channels is None else await self._channels.health()

    async def deliver(self, message: OutboundMessage) -> Delivered:
        """One reply from the outbound stream, delivered (or given up on: logged, counted)."""
        assert self._channels is not None
        try:
            platform_ids = await self._channels.deliver(message)
        except DeliveryError as error:
            # Logged with its context and counted by the delivery layer, as in one process.
            log.info("cluster.reply_given_up", profile=self.profile_id, error=str(error))
            return Delivered(given_up=str(error))
        return Delivered(tuple(platform_ids))

    async def run(self, started: asyncio.Event, stop: asyncio.Event) -> None:
        """Run the channels until `stop`; intake stops first, then the channels."""
        node = self._node
        async with AsyncExitStack() as stack:
            # Read-only: the web chat's history; sessions are written by workers.
            history_store = await stack.enter_async_context(
                session_store(self._shared.store, self._root, read_only=True)
            )
            topics = active_topics(self._shared.store, self._root, history_store)
            await topics.load()
            history = ProfileHistory(
                self.profile_id,
                SessionManager(history_store, max_open=64),
                topics,
                written_elsewhere=True,
            )
            handle, publisher = create_bus(self._shared.bus_capacity)
            strangers = StrangerNotices(handle.send)
            channels = ChannelManager(
                self.profile_id,
                publisher,
                metrics=ChannelMetrics(self._shared.metrics.registry, self.profile_id),
                intake=lambda: intake,
                # A single-poller channel (Telegram long polling, IMAP) polls only while this
                # process holds its lease: one poller per bot across every ingress.
                run_channel=(
                    node.leases.for_profile(self.profile_id)
                    if node.leases is not None
                    else start_channel
                ),
            )
            intake = ClusterIntake(
                self.profile_id,
                node.js,
                node.names,
                node.id,
                channels.channel,
                strangers,
                self._shared.metrics,
            )
            stack.callback(self._shared.webhooks.unmount, self.profile_id)
            pairing = Pairing(self.profile_id, self._root)
            await pairing.load()
            strangers.stranger_notice = pairing.stranger_notice
            built = build_channels(
                self.profile_id,
                self._config,
                self._root,
                history=history,
                pairing=pairing,
                webhooks=self._shared.webhooks,
                request_shutdown=self._shared.request_shutdown,
            )
            register_all(channels, built, self._config)
            self._channels = channels
            async with asyncio.TaskGroup() as tasks:
                channel_task = tasks.create_task(channels.run(), name=f"channels:{self.profile_id}")
                overlay_task = tasks.create_task(
                    pairing.watch(), name=f"allow-overlay:{self.profile_id}"
                )
                node.add_ingress_profile(self.profile_id, self.deliver)
                started.set()
                await stop.wait()
                intake.stop()
                node.remove_ingress_profile(self.profile_id)
                handle.close()
                await channels.drain()
                await channels.stop()
                channel_task.cancel()
                overlay_task.cancel()
