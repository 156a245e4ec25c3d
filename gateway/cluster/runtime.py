"""One profile in a cluster process: its ingress side, its worker side, or both (`--role`).

To the daemon it is a profile like any other (its `ProfileProcess`: started, ready, health,
request_stop, run), so the daemon supervises, reloads and stops profiles the same way in
either mode.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import structlog

from channels.health import ChannelHealth
from config import ProfileConfig
from gateway.cluster.ingress import IngressProfile
from gateway.cluster.node import ClusterNode
from gateway.cluster.profile_worker import WorkerProfile, worker_profile
from gateway.cluster.sends import ClusterOutbox
from gateway.services import ProcessServices

log = structlog.get_logger(__name__)


class ClusterProfileRuntime:
    def __init__(
        self, profile_id: str, config: ProfileConfig, shared: ProcessServices, node: ClusterNode
    ) -> None:
        self.profile_id = profile_id
        self.config = config
        self._shared = shared
        self._node = node
        self._ingress = (
            IngressProfile(profile_id, config, shared, node) if node.runs_ingress else None
        )
        self._worker: WorkerProfile | None = None
        channels = {channel.type for channel in config.channels}
        self._outbox = node.outbox(profile_id, knows_channel=channels.__contains__)
        self._stop = asyncio.Event()
        self.started = asyncio.Event()
        self.ready = asyncio.Event()

    async def health(self) -> dict[str, ChannelHealth]:
        return {} if self._ingress is None else await self._ingress.health()

    @property
    def outbox(self) -> ClusterOutbox | None:
        """The owner's sends: taken on any process of the cluster, whatever its role."""
        return self._outbox

    def open_sessions(self) -> int:
        return 0 if self._worker is None else self._worker.open_sessions

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        async with AsyncExitStack() as stack:
            if self._node.runs_worker:
                try:
                    self._worker = await stack.enter_async_context(
                        worker_profile(
                            self.profile_id,
                            self.config,
                            self._shared.data_dir,
                            self._shared.store,
                            self._shared.metrics,
                            media_links=self._shared.media_links,
                        )
                    )
                except BaseException:
                    self._node.worker_profile_failed(self.profile_id)
                    raise
                self._node.add_worker_profile(self.profile_id, self._worker)
                stack.push_async_callback(self._node.remove_worker_profile, self.profile_id)
            if self._ingress is not None:
                started = asyncio.Event()
                async with asyncio.TaskGroup() as tasks:
                    tasks.create_task(
                        self._ingress.run(started, self._stop), name=f"ingress:{self.profile_id}"
                    )
                    await started.wait()
                    self._announce()
            else:
                self._announce()
                await self._stop.wait()
        log.info("profile.stopped", profile=self.profile_id)

    def _announce(self) -> None:
        self.started.set()
        self.ready.set()
        log.info(
            "profile.started",
            profile=self.profile_id,
            role=self._node.role,
            channels=[c.type for c in self.config.channels] if self._ingress else [],
        )
