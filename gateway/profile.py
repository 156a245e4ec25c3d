"""One profile at run time: its journal, channels, agent, sessions and dispatcher, started and
stopped as a unit so that SIGHUP can replace one profile without touching the others.

Start-up order: the session store and the journal open (the journal replays what the last run
left unfinished), the dispatcher recovers it, and channels start only then, so a platform is
never acknowledged before the profile can take its messages. Shutdown: intake stops, running
turns finish, their replies are delivered, a checkpoint cuts the log, files close.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

import structlog

from bus import OutboundMessage, create_bus
from channels.errors import DeliveryError
from channels.health import ChannelHealth
from channels.manager import ChannelManager
from channels.metrics import ChannelMetrics
from config import ProfileConfig
from config.store import StoreConfig
from gateway.agents import create_agent
from gateway.commands import Commands
from gateway.dispatcher import Dispatcher, DispatcherSettings
from gateway.history import ProfileHistory
from gateway.intake import ProfileIntake
from gateway.journal import Journal, Recovery
from gateway.metrics import GatewayMetrics
from gateway.pairing import Pairing
from gateway.profile_channels import register_channels
from gateway.turns import TurnRunner, TurnSettings
from gateway.webhooks import WebhookRoutes
from sessions import ActiveTopics, SessionManager, SessionStore
from sessions.backends import session_store

log = structlog.get_logger(__name__)

JOURNAL_DIR = "journal"


class ProfileRuntime:
    def __init__(
        self,
        profile_id: str,
        config: ProfileConfig,
        data_dir: Path,
        *,
        bus_capacity: int,
        metrics: GatewayMetrics,
        webhooks: WebhookRoutes,
        request_shutdown: Callable[[], None],
        store: StoreConfig | None = None,
    ) -> None:
        self.profile_id = profile_id
        self._store = store or StoreConfig()
        self.config = config
        self.root = data_dir / profile_id
        self._bus_capacity = bus_capacity
        self._metrics = metrics
        self._webhooks = webhooks
        self._request_shutdown = request_shutdown
        self._channels: ChannelManager | None = None
        self._dispatcher: Dispatcher | None = None
        self._sessions: SessionManager | None = None
        self._stop = asyncio.Event()
        self.started = asyncio.Event()
        #: Set once the journal's unfinished work is taken up again and intake is open.
        self.ready = asyncio.Event()

    async def health(self) -> dict[str, ChannelHealth]:
        if self._channels is None:
            return {}
        return await self._channels.health()

    def open_sessions(self) -> int:
        """Sessions held open in memory now (the status page)."""
        return len(self._sessions) if self._sessions is not None else 0

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Run until `request_stop`, then finish running turns and deliver their replies."""
        settings = self.config.sessions
        async with AsyncExitStack() as stack:
            # The journal is the durable copy: session files are written behind it and synced
            # at its checkpoints, so their appends need not wait for the disk.
            # (PostgreSQL, when configured, commits every append: nothing to sync.)
            store = await stack.enter_async_context(
                session_store(
                    self._store,
                    self.root,
                    jsonl=lambda: SessionStore(
                        self.root,
                        fsync="never",
                        track_unsynced=settings.fsync != "never",
                        max_file_bytes=int(settings.max_file_mb * 1024 * 1024),
                    ),
                )
            )
            agent = await stack.enter_async_context(create_agent(self.config.agent))
            sessions = SessionManager(store, max_open=settings.max_open)
            self._sessions = sessions
            topics = ActiveTopics(self.root)
            await topics.load()
            handle, publisher = create_bus(self._bus_capacity)

            def delivered(message: OutboundMessage, error: DeliveryError | None) -> None:
                assert message.delivery_id is not None
                journal.record_delivered(message.delivery_id, failed=error is not None)

            intake = ProfileIntake()
            channels = ChannelManager(
                self.profile_id,
                publisher,
                metrics=ChannelMetrics(self._metrics.registry, self.profile_id),
                on_delivered=delivered,
                intake=lambda: intake,
            )
            stack.callback(self._webhooks.unmount, self.profile_id)
            pairing = Pairing(self.profile_id, self.root)
            await pairing.load()
            register_channels(
                self.profile_id,
                self.config,
                self.root,
                channels,
                history=ProfileHistory(self.profile_id, sessions, topics),
                pairing=pairing,
                webhooks=self._webhooks,
                request_shutdown=self._request_shutdown,
            )
            journal = Journal(
                self.root / JOURNAL_DIR,
                fsync=settings.fsync,
                keeps_replies=frozenset(
                    channel.name for channel in channels.channels if channel.replies_to_retries
                ),
            )
            recovery = await journal.open()
            stack.push_async_callback(journal.close)
            runner = TurnRunner(
                TurnSettings(self.profile_id, settings.max_history),
                agent,
                sessions,
                handle,
                self._metrics,
            )
            dispatcher = Dispatcher(
                DispatcherSettings(
                    self.profile_id,
                    self.config.queue_mode,
                    self.config.agent.type,
                    max_backlog_per_chat=settings.max_backlog_per_chat,
                    max_backlog=settings.max_backlog,
                    max_concurrent_turns=settings.max_concurrent_turns,
                ),
                journal,
                handle,
                channels.channel,
                runner,
                Commands(sessions, topics, settings.fork_copy),
                sessions,
                self._metrics,
            )
            intake.connect(dispatcher.intake)
            dispatcher.intake.strangers.stranger_notice = pairing.stranger_notice
            self._channels, self._dispatcher = channels, dispatcher
            await self._serve(channels, dispatcher, handle.close, recovery, pairing)
            await dispatcher.checkpoint()
            await topics.save()
        log.info("profile.stopped", profile=self.profile_id)

    async def _serve(
        self,
        channels: ChannelManager,
        dispatcher: Dispatcher,
        close_outbound: Callable[[], None],
        recovery: Recovery,
        pairing: Pairing,
    ) -> None:
        async with asyncio.TaskGroup() as tasks:
            dispatch_task = tasks.create_task(
                dispatcher.run(recovery), name=f"dispatcher:{self.profile_id}"
            )
            channel_task = tasks.create_task(channels.run(), name=f"channels:{self.profile_id}")
            overlay_task = tasks.create_task(
                pairing.watch(), name=f"allow-overlay:{self.profile_id}"
            )
            self.started.set()
            await dispatcher.wait_ready()
            self.ready.set()
            log.info(
                "profile.started",
                profile=self.profile_id,
                channels=[c.type for c in self.config.channels],
            )
            await self._stop.wait()
            # Intake stops first; running turns finish and their replies are delivered.
            dispatcher.stop_intake()
            await dispatch_task
            close_outbound()
            await channels.drain()
            await channels.stop()
            channel_task.cancel()
            overlay_task.cancel()
