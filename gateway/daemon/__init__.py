"""The daemon: every profile under one roof, the HTTP server, signals and reloads.

SIGTERM or SIGINT stops intake, lets running turns finish within `shutdown_grace_s`, flushes
sessions, closes clients and exits 0; a second signal exits at once. SIGHUP reloads the profiles
(added, removed, changed, and those that failed) without touching the unchanged ones.

A profile that fails (at start-up, at run time, or added by a reload) leaves the others running
and makes `/readyz` 503 naming it; when no profile could start at all the daemon exits, with the
status of the first failure (`gateway.daemon.profile`), rather than serve nothing.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol
from urllib.parse import urlsplit

import structlog
from prometheus_client import CollectorRegistry

from channels.health import ChannelHealth
from channels.media_links import MediaLinks, public_base_url
from channels.web.guard import ConnectionGuard, install_accept_error_log
from channels.web.names import HostCheck, listener_names
from config import ApiChannelConfig, ConfigError, LoadedConfig, ProfileConfig
from gateway.daemon.collector import keep_settled, settle_after_start_up
from gateway.daemon.http_server import HttpServer, MessagesRoutes, build_app, webhook_hosts
from gateway.daemon.profile import ProfileFailure, ProfileRuntime, diagnose
from gateway.daemon.reply_dead_letters import SHOWN_ON_STATUS_PAGE, DeadLetterStore
from gateway.daemon.status_page import DeadLetterSummary, ProfileFacts, StatusPage, build_snapshot
from gateway.logs import recent_failures
from gateway.metrics import GatewayMetrics
from gateway.pairing import PairingDatabases
from gateway.services import ProcessServices, WebhookRoutes
from gateway.turn.outbox import Sends
from sessions.errors import SessionError

if TYPE_CHECKING:
    from gateway.cluster.node import ClusterNode

log = structlog.get_logger(__name__)

#: What this process runs in a cluster: channels (ingress), agents (worker), or both.
Role = Literal["all", "ingress", "worker"]


class ProfileProcess(Protocol):
    """One profile at run time, in one process (`ProfileRuntime`) or a cluster's."""

    profile_id: str
    config: ProfileConfig
    started: asyncio.Event
    #: Set once the profile takes messages (its journal's unfinished work taken up again).
    ready: asyncio.Event

    async def health(self) -> dict[str, ChannelHealth]: ...

    @property
    def outbox(self) -> Sends | None:
        """The owner's sends (`POST /v1/messages`), once the profile is built."""
        ...

    def open_sessions(self) -> int: ...

    def request_stop(self) -> None: ...

    async def run(self) -> None: ...


#: Exit status when a second signal cuts the graceful shutdown short.
EXIT_FORCED = 130
#: Exit status when the health and metrics server cannot listen (EX_UNAVAILABLE).
EXIT_NO_HTTP = 69


class Daemon:
    def __init__(
        self,
        loaded: LoadedConfig,
        reload_config: Callable[[], LoadedConfig] | None = None,
        *,
        role: Role = "all",
    ) -> None:
        self._loaded = loaded
        self._role: Role = role
        #: The cluster this process belongs to (`bus: {backend: nats}`); None in one process.
        self._node: ClusterNode | None = None
        # The session store is chosen once: a reload must not move some profiles elsewhere.
        self._store = loaded.gateway.store
        self._reload_config = reload_config
        self._registry = CollectorRegistry()
        self._metrics = GatewayMetrics.create(self._registry)
        self._webhooks = WebhookRoutes()
        self._pairing = PairingDatabases()
        #: Made when the HTTP server starts (`run`), before any profile.
        self._media_links: MediaLinks | None = None
        self._profiles: dict[str, tuple[ProfileProcess, asyncio.Task[None]]] = {}
        #: Profiles of `_profiles` whose run ended in an exception, until a reload retries them.
        self._failed: dict[str, ProfileFailure] = {}
        #: Set once every profile of the start-up has started or failed.
        self._settled = asyncio.Event()
        self._exit_status = 0
        # Signal handlers set a flag and wake the main loop, which acts on it.
        self._wake = asyncio.Event()
        self._shutdown_requested = False
        self._reload_requested = False
        self._tasks: asyncio.TaskGroup | None = None
        self.http: HttpServer | None = None
        self._hosts = HostCheck(set(), "gateway.yaml http.allowed_hosts")
        self._started_at = time.monotonic()

    async def status_snapshot(self) -> dict[str, object]:
        facts: dict[str, ProfileFacts] = {}
        for pid, (runtime, _task) in self._profiles.items():
            agent, dead_letters = runtime.config.agent_summary(), await self._dead_letters_of(pid)
            if (failure := self._failed.get(pid)) is None:
                facts[pid] = ProfileFacts(
                    agent, await runtime.health(), runtime.open_sessions(), None, dead_letters
                )
            else:
                facts[pid] = ProfileFacts(agent, {}, 0, failure.summary(), dead_letters)
        snapshot = build_snapshot(facts, self._registry, recent_failures, self._started_at)
        if (joined := await self.cluster_readiness()) is not None:
            snapshot["cluster"] = joined[1]  # which worker runs which turn, from any process
        return snapshot

    async def _dead_letters_of(self, profile_id: str) -> DeadLetterSummary:
        """The profile's replies kept as dead letters (read from its data directory, so a
        failed profile's are shown too)."""
        store = DeadLetterStore(Path(self._loaded.gateway.data_dir) / profile_id)
        try:
            count, newest = await asyncio.to_thread(store.newest, SHOWN_ON_STATUS_PAGE)
        except OSError as error:
            # The page shows the rest; the folder's problem is the profile's to report.
            log.warning("status.dead_letters_unreadable", profile=profile_id, error=str(error))
            return DeadLetterSummary()
        return DeadLetterSummary(count, [letter.summary() for letter in newest])

    async def readiness(self) -> dict[str, dict[str, ChannelHealth]]:
        return {
            pid: await runtime.health()
            for pid, (runtime, _task) in self._profiles.items()
            if pid not in self._failed
        }

    def outboxes(self) -> dict[str, Sends | None]:
        """Each profile's owner's sends; None while it does not take messages."""
        return {
            pid: runtime.outbox if runtime.ready.is_set() and pid not in self._failed else None
            for pid, (runtime, _task) in self._profiles.items()
        }

    def failed_profiles(self) -> dict[str, str]:
        """Each profile that is not running because it failed, and why."""
        return {pid: failure.summary() for pid, failure in self._failed.items()}

    async def cluster_readiness(self) -> tuple[bool, dict[str, object]] | None:
        """This process's NATS and PostgreSQL connections and the cluster's running turns."""
        return None if self._node is None else await self._node.report()

    async def run(self) -> int:
        settings = self._loaded.gateway
        for warning in self._loaded.warnings:
            log.warning("config.warning", detail=str(warning))
        http = settings.http
        install_accept_error_log(asyncio.get_running_loop(), http.limits.accept_error_interval_s)
        guard = ConnectionGuard(http.limits, "http", http.max_body_bytes)
        self._hosts = HostCheck(self._http_names(), "gateway.yaml http.allowed_hosts")
        token = http.token.get_secret_value() if http.token else None
        status = StatusPage(self.status_snapshot, token=token, loopback=http.is_loopback)
        media_links = self._media_links = await self._open_media_links()
        self.http = HttpServer(
            build_app(
                self._registry,
                self.readiness,
                self._webhooks,
                guard,
                self._hosts,
                status,
                cluster=self.cluster_readiness,
                failed=self.failed_profiles,
                media_links=media_links,
                messages=MessagesRoutes(
                    self.outboxes,
                    token=token,
                    allow_local=http.allow_local_send,
                ),
            ),
            http.host,
            http.port,
            guard,
        )
        try:
            await self.http.start()
        except OSError as error:
            log.error(
                "daemon.http_unavailable",
                detail="cannot start the HTTP server",
                address=f"{settings.http.host}:{settings.http.port}",
                error=str(error),
                suggestion="choose a free port in gateway.yaml's http.port (0 picks one)",
            )
            return EXIT_NO_HTTP
        log.info(
            "daemon.listening",
            url=f"http://{settings.http.host}:{self.http.bound_port}",
            health="/healthz",
        )
        if media_links is not None:
            port = self.http.bound_port or http.port
            media_links.base_url = public_base_url(http.public_url, http.host, port)
        self._install_signals()
        try:
            async with AsyncExitStack() as stack:
                if settings.bus.backend == "nats":
                    from gateway.cluster.connection import BusUnavailable

                    # Reported on /readyz from now on: not ready until it has joined.
                    self._node = self._cluster_node()
                    try:
                        await stack.enter_async_context(self._node)
                    except (BusUnavailable, SessionError) as error:
                        log.error("cluster.join_failed", error=str(error))
                        return EXIT_NO_HTTP
                await self._serve(settings.shutdown_grace_s)
        finally:
            await self.http.stop()
        log.info("daemon.stopped", exit_status=self._exit_status)
        return self._exit_status

    def _cluster_node(self) -> ClusterNode:
        from gateway.cluster.node import ClusterNode

        settings = self._loaded.gateway
        return ClusterNode(
            settings.bus.nats,
            self._store,
            self._role,
            self._registry,
            self._metrics.reply_dead_letters,
        )

    async def _serve(self, grace_s: float) -> None:
        node = self._node
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            worker = delivery = None
            if node is not None:
                node.expect_worker_profiles(self._loaded.profiles)
                worker = tasks.create_task(node.run_worker(), name="cluster-worker")
                delivery = tasks.create_task(node.run_delivery(), name="cluster-delivery")
            for profile_id, config in self._loaded.profiles.items():
                self._start_profile(profile_id, config)
            start_up = tasks.create_task(self._finish_start_up(), name="start-up")
            collector = tasks.create_task(self._settle_collector(), name="gc-settle")
            await self._serve_until_shutdown()
            start_up.cancel()
            if node is not None and worker is not None and delivery is not None:
                # Turns in hand finish and their replies are published; then deliveries in
                # hand finish; what is left waits in the streams for the next process.
                node.stop_worker()
                await asyncio.wait([worker], timeout=grace_s)
                node.stop_delivery()
                await asyncio.wait([delivery], timeout=grace_s)
            await self._stop_all(grace_s)
            collector.cancel()

    async def _settle_collector(self) -> None:
        """Once every profile has started, the collector is set for serving turns, and kept
        so until the daemon stops (`gateway.daemon.collector`)."""
        await self._settled.wait()
        log.debug("gc.frozen", objects=settle_after_start_up())
        await keep_settled()

    async def _finish_start_up(self) -> None:
        """Once every profile has started or failed: announce what runs, or, when nothing
        does, shut down with the first failure's exit status."""
        await asyncio.gather(
            *(_started_or_ended(runtime, task) for runtime, task in self._profiles.values())
        )
        self._settled.set()
        failures = [self._failed[pid] for pid in self._profiles if pid in self._failed]
        if failures and len(failures) == len(self._profiles):
            self._exit_status = failures[0].exit_status
            log.info(
                "daemon.shutting_down",
                reason="no profile could start",
                exit_status=self._exit_status,
            )
            self.request_shutdown()
            return
        assert self.http is not None
        self._announce(self.http.bound_port)

    async def _open_media_links(self) -> MediaLinks | None:
        data_dir = Path(self._loaded.gateway.data_dir)
        try:
            return await asyncio.to_thread(MediaLinks.open, data_dir)
        except OSError as error:
            log.error(
                "daemon.media_links_unavailable",
                detail="webhook agents get no links to received files",
                error=str(error),
                suggestion=f"make {data_dir} writable by the daemon",
            )
            return None

    def _http_names(self) -> set[str]:
        http = self._loaded.gateway.http
        public = [urlsplit(http.public_url).hostname or ""] if http.public_url else []
        return listener_names(
            http.host, http.allowed_hosts, [*webhook_hosts(self._loaded.profiles), *public]
        )

    def _announce(self, http_port: int | None) -> None:
        """One start-up line with every URL a user may open, and how to stop."""
        settings = self._loaded.gateway
        chats = [
            f"{opened_url(channel.host, channel.port)} ({pid})"
            for pid, (runtime, _task) in self._profiles.items()
            if pid not in self._failed
            for channel in runtime.config.channels
            if isinstance(channel, ApiChannelConfig) and channel.port and self._role != "worker"
        ]
        log.info(
            "gateway.started",
            status_page=opened_url(settings.http.host, http_port or settings.http.port),
            web_chat=chats,
            stop="Ctrl+C, or SIGTERM (docker stop)",
        )

    async def _serve_until_shutdown(self) -> None:
        while not self._shutdown_requested:
            await self._wake.wait()
            self._wake.clear()
            if self._reload_requested and not self._shutdown_requested:
                self._reload_requested = False
                await self._apply_reload()

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()

        def on_stop(signame: str) -> None:
            if self._shutdown_requested:
                log.warning(
                    "daemon.forced_exit", signal=signame, detail="second signal: exiting at once"
                )
                os._exit(EXIT_FORCED)
            log.info("daemon.shutting_down", signal=signame)
            self.request_shutdown()

        def on_reload() -> None:
            log.info("reload.requested", signal="SIGHUP")
            self._reload_requested = True
            self._wake.set()

        loop.add_signal_handler(signal.SIGTERM, on_stop, "SIGTERM")
        loop.add_signal_handler(signal.SIGINT, on_stop, "SIGINT")
        loop.add_signal_handler(signal.SIGHUP, on_reload)

    def request_shutdown(self) -> None:
        self._shutdown_requested = True
        self._wake.set()

    def _start_profile(self, profile_id: str, config: ProfileConfig) -> None:
        assert self._tasks is not None
        runtime: ProfileProcess
        shared = ProcessServices(
            Path(self._loaded.gateway.data_dir),
            self._store,
            self._loaded.gateway.bus,
            self._metrics,
            self._webhooks,
            self.request_shutdown,
            self._pairing,
            self._media_links,
        )
        if self._node is None:
            runtime = ProfileRuntime(profile_id, config, shared)
        else:
            from gateway.cluster.runtime import ClusterProfileRuntime

            runtime = ClusterProfileRuntime(profile_id, config, shared, self._node)
        task = self._tasks.create_task(self._supervise(runtime), name=f"profile:{profile_id}")
        self._profiles[profile_id] = (runtime, task)

    async def _supervise(self, runtime: ProfileProcess) -> None:
        try:
            await runtime.run()
        except Exception as error:
            # Supervision point: one broken profile must not take the others down.
            self._failed[runtime.profile_id] = self._profile_failed(runtime.profile_id, error)

    def _profile_failed(self, profile_id: str, error: Exception) -> ProfileFailure:
        failure = diagnose(error, Path(self._loaded.gateway.data_dir))
        if not failure.known:
            log.error("profile.failed", profile=profile_id, error=failure.reason, exc_info=error)
            return failure
        fix = {"suggestion": failure.suggestion} if failure.suggestion else {}
        log.error("profile.failed", profile=profile_id, error=failure.reason, **fix)
        log.debug("profile.failure_traceback", profile=profile_id, exc_info=error)
        return failure

    async def _stop_profiles(self, profile_ids: list[str], grace_s: float) -> None:
        entries = [self._profiles.pop(pid) for pid in profile_ids if pid in self._profiles]
        for pid in profile_ids:
            self._failed.pop(pid, None)
        for runtime, _task in entries:
            runtime.request_stop()
        tasks = [task for _runtime, task in entries]
        if not tasks:
            return
        _done, late = await asyncio.wait(tasks, timeout=grace_s)
        for task in late:
            log.warning("profile.stop_grace_exceeded", task=task.get_name())
            task.cancel()
        if late:
            await asyncio.wait(late)

    async def _stop_all(self, grace_s: float) -> None:
        await self._stop_profiles(list(self._profiles), grace_s)

    async def _apply_reload(self) -> None:
        if self._reload_config is None:
            log.info("reload.ignored", detail="the daemon runs the embedded default config")
            return
        try:
            fresh = await asyncio.to_thread(self._reload_config)
        except ConfigError as error:
            for problem in error.problems:
                log.error("reload.refused", detail="invalid config", problem=str(problem))
            return
        if fresh.gateway.store != self._store:
            log.warning(
                "reload.store_unchanged",
                detail="gateway.yaml's store changed: it takes effect at the next start",
            )
        if fresh.gateway.bus != self._loaded.gateway.bus:
            # The streams, partitions and role of a cluster process are fixed at start-up.
            log.warning(
                "reload.bus_unchanged",
                detail="gateway.yaml's bus changed: it takes effect at the next start",
            )
        current = {pid: runtime.config for pid, (runtime, _t) in self._profiles.items()}
        removed = [pid for pid in current if pid not in fresh.profiles]
        changed = [
            pid
            for pid, config in fresh.profiles.items()
            if pid in current and current[pid] != config
        ]
        added = [pid for pid in fresh.profiles if pid not in current]
        # A failed profile is tried again: what it failed on (a data directory, another
        # daemon) may have been put right outside its YAML.
        retried = [pid for pid in self._failed if pid in fresh.profiles and pid not in changed]
        log.info(
            "reload.profiles_changed",
            added=added,
            removed=removed,
            changed=changed,
            retried=retried,
        )
        await self._stop_profiles(
            removed + changed + retried, self._loaded.gateway.shutdown_grace_s
        )
        self._loaded = fresh
        self._hosts.allowed = self._http_names()
        for pid in added + changed + retried:
            self._start_profile(pid, fresh.profiles[pid])


async def _started_or_ended(runtime: ProfileProcess, task: asyncio.Task[None]) -> None:
    """Until `runtime` takes messages, or its run has ended (it failed, or was stopped)."""
    ready = asyncio.create_task(runtime.ready.wait(), name=f"ready:{runtime.profile_id}")
    try:
        await asyncio.wait([ready, task], return_when=asyncio.FIRST_COMPLETED)
    finally:
        ready.cancel()


def opened_url(host: str, port: int) -> str:
    """The URL to open for a listener: one on every interface is opened on this machine."""
    if host in ("0.0.0.0", "::", ""):
        return f"http://127.0.0.1:{port}/"
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
