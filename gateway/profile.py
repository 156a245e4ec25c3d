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
from dataclasses import dataclass
from pathlib import Path

import structlog

from bus import AgentHandle, OutboundMessage, create_bus
from channels.base import Channel
from channels.errors import DeliveryError
from channels.health import ChannelHealth
from channels.manager import ChannelManager, DeliveryHook
from channels.metrics import ChannelMetrics
from config import ProfileConfig
from config.store import StoreConfig
from gateway.agents import Agent, create_agent
from gateway.commands import Commands
from gateway.dispatcher import Dispatcher, DispatcherSettings
from gateway.history import ProfileHistory
from gateway.intake import ProfileIntake
from gateway.journal import Journal, Recovery
from gateway.metrics import GatewayMetrics
from gateway.pairing import Pairing
from gateway.pairing_stores import pairing_store
from gateway.profile_channels import build_channels, register_all
from gateway.turns import TurnRunner, TurnSettings
from gateway.webhooks import WebhookRoutes
from sessions import SessionManager, SessionStore
from sessions.backends import active_topics, session_store
from sessions.topics import ActiveTopicsStore

log = structlog.get_logger(__name__)

JOURNAL_DIR = "journal"


@dataclass(frozen=True, slots=True)
class _Built:
    """What `_build` made and `_serve` runs."""

    channels: ChannelManager
    dispatcher: Dispatcher
    handle: AgentHandle
    recovery: Recovery
    pairing: Pairing


def _delivery_recorder(journal: Journal) -> DeliveryHook:
    """The manager's hook that tells the journal a reply was delivered (or given up on)."""

    def delivered(
        message: OutboundMessage, _platform_ids: list[str], error: DeliveryError | None
    ) -> None:
        assert message.delivery_id is not None
        journal.record_delivered(message.delivery_id, failed=error is not None)

    return delivered


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

    async def checkpoint(self) -> None:
        """Cut the journal now: session files synced, the log down to what is unfinished."""
        if self._dispatcher is not None:
            await self._dispatcher.checkpoint()

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Run until `request_stop`, then finish running turns and deliver their replies."""
        async with AsyncExitStack() as stack:
            built = await self._build(stack)
            await self._serve(built)
            await built.dispatcher.checkpoint()
        log.info("profile.stopped", profile=self.profile_id)

    async def _build(self, stack: AsyncExitStack) -> _Built:
        """Everything the profile runs, in dependency order; `stack` closes what it opened.

        Channels are built first: the journal needs to know which of them answer retries, and
        the dispatcher looks channels up by name, so neither waits for the channel manager,
        which is built last, around the dispatcher's intake.
        """
        settings = self.config.sessions
        sessions, topics = await self._open_sessions(stack)
        agent = await stack.enter_async_context(create_agent(self.config.agent))
        handle, publisher = create_bus(self._bus_capacity)
        stack.callback(self._webhooks.unmount, self.profile_id)
        pairing = Pairing(
            self.profile_id,
            await stack.enter_async_context(pairing_store(self._store, self.root)),
        )
        await pairing.load()
        built_channels = build_channels(
            self.profile_id,
            self.config,
            self.root,
            history=ProfileHistory(self.profile_id, sessions, topics),
            pairing=pairing,
            webhooks=self._webhooks,
            request_shutdown=self._request_shutdown,
        )
        journal = Journal(
            self.root / JOURNAL_DIR,
            fsync=settings.fsync,
            keeps_replies=frozenset(c.name for c in built_channels if c.replies_to_retries),
        )
        recovery = await journal.open()
        stack.push_async_callback(journal.close)
        # A later channel of the same name replaces an earlier one, as in the manager.
        channel_named = {channel.name: channel for channel in built_channels}.get
        dispatcher = self._dispatcher_for(journal, handle, channel_named, agent, sessions, topics)
        dispatcher.intake.strangers.stranger_notice = pairing.stranger_notice
        intake = ProfileIntake(dispatcher.intake)
        channels = ChannelManager(
            self.profile_id,
            publisher,
            metrics=ChannelMetrics(self._metrics.registry, self.profile_id),
            on_delivered=_delivery_recorder(journal),
            intake=lambda: intake,
        )
        register_all(channels, built_channels, self.config)
        self._channels, self._dispatcher = channels, dispatcher
        return _Built(channels, dispatcher, handle, recovery, pairing)

    async def _open_sessions(
        self, stack: AsyncExitStack
    ) -> tuple[SessionManager, ActiveTopicsStore]:
        settings = self.config.sessions
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
        sessions = SessionManager(store, max_open=settings.max_open)
        self._sessions = sessions
        topics = active_topics(self._store, self.root, store)
        await topics.load()
        return sessions, topics

    def _dispatcher_for(
        self,
        journal: Journal,
        handle: AgentHandle,
        channel_named: Callable[[str], Channel | None],
        agent: Agent,
        sessions: SessionManager,
        topics: ActiveTopicsStore,
    ) -> Dispatcher:
        settings = self.config.sessions
        runner = TurnRunner(
            TurnSettings(self.profile_id, settings.max_history),
            agent,
            sessions,
            handle,
            self._metrics,
        )
        return Dispatcher(
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
            channel_named,
            runner,
            Commands(sessions, topics, settings.fork_copy),
            sessions,
            self._metrics,
        )

    async def _serve(self, built: _Built) -> None:
        channels, dispatcher, pairing = built.channels, built.dispatcher, built.pairing
        async with asyncio.TaskGroup() as tasks:
            dispatch_task = tasks.create_task(
                dispatcher.run(built.recovery), name=f"dispatcher:{self.profile_id}"
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
            built.handle.close()
            await channels.drain()
            await channels.stop()
            channel_task.cancel()
            overlay_task.cancel()
