"""One profile at run time: its journal, channels, agent, sessions and dispatcher, started and
stopped as a unit so that SIGHUP can replace one profile without touching the others.

Start-up order: the session store and the journal open (the journal replays what the last run
left unfinished), the dispatcher recovers it, and channels start only then, so a platform is
never acknowledged before the profile can take its messages. Shutdown: intake stops, running
turns finish, their replies are delivered, a checkpoint cuts the log, files close.

When a profile stops running, `diagnose` says why in words an operator can act on, and
the exit status it earns: the mistakes an operator can fix (a second daemon on the same data
directory, a data directory that is a file or not writable, a port another process holds) are
one line with the fix, the traceback kept for debug; any other exception is a defect, logged
with its traceback in full.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import structlog

from bus import AgentHandle, OutboundMessage, create_bus
from channels.base import Channel
from channels.errors import DeliveryError
from channels.health import ChannelHealth
from channels.metrics import ChannelMetrics
from channels.outbound.manager import ChannelManager
from channels.outbound.streaming import StreamKey
from config import ProfileConfig
from gateway.agents import Agent, open_agents
from gateway.daemon.reply_dead_letters import DeadLetterStore, ProfileDeadLetters
from gateway.pairing import Pairing, open_pairing
from gateway.profile_channels import build_channels, not_built_yet, register_all
from gateway.services import ProcessServices, ProfileServices
from gateway.turn.commands import Commands
from gateway.turn.dispatcher import Dispatcher, DispatcherSettings
from gateway.turn.history import ProfileHistory
from gateway.turn.journal import Journal, Received, Recovery
from gateway.turn.outbox import Outbox
from gateway.turn.runner import TurnRunner
from sessions import SessionManager, SessionStore
from sessions.backends import active_topics, session_store
from sessions.wal import LogInUse, LogWriteError

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _JournaledStreams:
    """The stream editor's record (`channels.outbound.streaming.StreamRecord`): the journal, where a
    stream's id is its turn's."""

    journal: Journal

    async def opened(self, key: StreamKey, part: int, platform_id: str) -> None:
        channel, chat_id, turn = key
        try:
            await self.journal.record_opened(turn, channel, chat_id, part, platform_id)
        except LogWriteError as error:
            # The journal takes nothing more (its own error says why); the reply still goes
            # out, and a crash now leaves this message beside the resent reply, as before.
            log.warning("profile.stream_not_recorded", channel=channel, error=str(error))

    def recorded(self, key: StreamKey) -> dict[int, str]:
        channel, chat_id, turn = key
        return self.journal.opened_parts(turn, channel, chat_id)


@dataclass(frozen=True, slots=True)
class _Built:
    """What `_build` made and `_serve` runs."""

    channels: ChannelManager
    dispatcher: Dispatcher
    handle: AgentHandle[Received]
    recovery: Recovery
    pairing: Pairing
    dead_letters: ProfileDeadLetters


#: The journal's directory in a profile's data directory (the gateway bench opens it too).
JOURNAL_DIR = "journal"


class ProfileRuntime:
    def __init__(self, profile_id: str, config: ProfileConfig, shared: ProcessServices) -> None:
        self.profile_id = profile_id
        self.config = config
        self.root = shared.data_dir / profile_id
        self._shared = shared
        self._channels: ChannelManager | None = None
        self._dispatcher: Dispatcher | None = None
        self._sessions: SessionManager | None = None
        self._stop = asyncio.Event()
        self.started = asyncio.Event()
        #: Set once the journal's unfinished work is taken up again and intake is open.
        self.ready = asyncio.Event()

    async def health(self) -> dict[str, ChannelHealth]:
        if self._channels is None:
            return not_built_yet(self.config)
        return await self._channels.health()

    @property
    def outbox(self) -> Outbox | None:
        """The owner's sends (`POST /v1/messages`), once the profile is built."""
        return self._dispatcher.outbox if self._dispatcher is not None else None

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
        # Every message a channel publishes goes through the dispatcher's intake (the bus's
        # log: the journal) before the dispatcher takes it from `handle`.
        handle, publisher = create_bus(
            self._shared.bus.capacity,
            carries=Received,
            replies_per_channel=self._shared.bus.replies_per_channel,
        )
        services = await self._open_services(stack)
        agents = await stack.enter_async_context(
            open_agents(self.config, media_links=self._shared.media_links)
        )
        stack.callback(self._shared.webhooks.unmount, self.profile_id)
        pairing = await open_pairing(
            stack, self.profile_id, self._shared.pairing.store(self._shared.store, self.root)
        )
        built_channels = build_channels(
            self.profile_id,
            self.config,
            self.root,
            history=ProfileHistory(self.profile_id, services.sessions, services.topics),
            pairing=pairing,
            webhooks=self._shared.webhooks,
            request_shutdown=self._shared.request_shutdown,
            media_links=self._shared.media_links,
        )
        journal = Journal(
            self.root / JOURNAL_DIR,
            fsync=settings.fsync,
            keeps_replies=frozenset(c.name for c in built_channels if c.replies_to_retries),
            buttons_ttl_s=self.config.buttons_ttl_s,
        )
        recovery = await journal.open()
        stack.push_async_callback(journal.close)
        # A later channel of the same name replaces an earlier one, as in the manager.
        channel_named = {channel.name: channel for channel in built_channels}.get
        dispatcher = self._dispatcher_for(services, journal, channel_named, agents, handle)
        dispatcher.intake.strangers.stranger_notice = pairing.stranger_notice
        dispatcher.intake.strangers.reread_approvals = pairing.reread
        publisher.log_through(dispatcher.intake)
        # Told of every reply delivered or given up on: the journal records it, and one given
        # up on is kept as a dead letter first.
        dead_letters = ProfileDeadLetters(
            self.profile_id,
            DeadLetterStore(self.root),
            journal,
            self._shared.metrics.reply_dead_letters,
            handle.send,
        )
        outbox = dispatcher.outbox

        def delivered(
            message: OutboundMessage, platform_ids: list[str], error: DeliveryError | None
        ) -> Awaitable[None] | None:
            # An owner's send learns its platform ids (or the refusal) before the journal
            # lets its reply go.
            outbox.delivered(message, platform_ids, error)
            return dead_letters.delivered(message, platform_ids, error)

        channels = ChannelManager(
            self.profile_id,
            publisher,
            metrics=ChannelMetrics(self._shared.metrics.registry, self.profile_id),
            on_delivered=delivered,
            delivery_deadline_s=self.config.delivery_deadline_s,
            stream_record=_JournaledStreams(journal),
        )
        register_all(channels, built_channels, self.config)
        waiting = self._shared.metrics.replies_waiting
        for name in {channel.name for channel in built_channels}:
            waiting.labels(self.profile_id, name).set_function(
                partial(publisher.replies_waiting, name)
            )
        self._channels, self._dispatcher = channels, dispatcher
        return _Built(channels, dispatcher, handle, recovery, pairing, dead_letters)

    async def _open_services(self, stack: AsyncExitStack) -> ProfileServices:
        settings = self.config.sessions
        # The journal is the durable copy: session files are written behind it and synced
        # at its checkpoints, so their appends need not wait for the disk.
        # (PostgreSQL, when configured, commits every append: nothing to sync.)
        store = await stack.enter_async_context(
            session_store(
                self._shared.store,
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
        topics = active_topics(self._shared.store, self.root, store)
        await topics.load()
        return ProfileServices(
            self.profile_id, self.config, sessions, topics, self._shared.metrics, self.root
        )

    def _dispatcher_for(
        self,
        services: ProfileServices,
        journal: Journal,
        channel_named: Callable[[str], Channel | None],
        agents: Mapping[str, Agent],
        bus: AgentHandle[Received],
    ) -> Dispatcher:
        settings = self.config.sessions
        return Dispatcher(
            DispatcherSettings(
                self.profile_id,
                self.config.queue_mode,
                self.config.agent_summary(),
                max_backlog_per_chat=settings.max_backlog_per_chat,
                max_backlog=settings.max_backlog,
                max_concurrent_turns=settings.max_concurrent_turns,
            ),
            services,
            journal,
            channel_named,
            TurnRunner(services, agents, bus),
            Commands(services),
            bus,
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
            retry_task = tasks.create_task(
                built.dead_letters.watch(), name=f"dead-letter-retries:{self.profile_id}"
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
            # Nothing more goes out: a retry asked for now is sent at the next start.
            retry_task.cancel()
            built.handle.close()
            await channels.drain()
            await channels.stop()
            channel_task.cancel()
            overlay_task.cancel()


#: Exit status when the data directory cannot be written (EX_CANTCREAT).
EXIT_CANNOT_CREATE = 73
#: Exit status when every profile failed with an unexpected error (EX_SOFTWARE).
EXIT_SOFTWARE = 70
#: Exit status when a port or the data directory's log is another process's (EX_UNAVAILABLE).
EXIT_UNAVAILABLE = os.EX_UNAVAILABLE

#: The errors of a data directory that is not a writable directory.
_UNUSABLE_DIRECTORY = frozenset(
    {errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EEXIST, errno.EROFS}
)
#: The errors of a listener whose address is taken or not this machine's.
_UNAVAILABLE_ADDRESS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL})


@dataclass(frozen=True, slots=True)
class ProfileFailure:
    """Why a profile is not running, for the log, `/readyz` and the status page."""

    reason: str
    #: What to do about it; empty when `reason` says it already, or the failure is unexpected.
    suggestion: str
    #: The daemon's exit status when no profile runs because of this.
    exit_status: int
    #: False for an unexpected exception, whose traceback is worth an operator's eyes.
    known: bool

    def summary(self) -> str:
        return f"{self.reason}; {self.suggestion}" if self.suggestion else self.reason


def diagnose(error: BaseException, data_dir: Path) -> ProfileFailure:
    """What `error`, which ended a profile keeping its data under `data_dir`, means."""
    for cause in _causes(error):
        if isinstance(cause, LogInUse):
            # Its message names the holder's pid and the fix.
            return ProfileFailure(str(cause), "", EXIT_UNAVAILABLE, known=True)
        if not isinstance(cause, OSError):
            continue
        if cause.errno in _UNUSABLE_DIRECTORY and _within(cause.filename, data_dir):
            return ProfileFailure(
                f"cannot use the data directory {data_dir}: {cause.strerror} ({cause.filename})",
                "make data_dir a directory this user can write, or choose another with "
                "gateway.yaml's data_dir or --data-dir",
                EXIT_CANNOT_CREATE,
                known=True,
            )
        if cause.errno in _UNAVAILABLE_ADDRESS:
            return ProfileFailure(
                f"cannot listen: {cause.strerror or cause}",
                "stop what uses the port, or choose another in the profile's channels",
                EXIT_UNAVAILABLE,
                known=True,
            )
    return ProfileFailure(f"{type(error).__name__}: {error}", "", EXIT_SOFTWARE, known=False)


def _causes(error: BaseException) -> Iterator[BaseException]:
    """`error` and what it holds: the members of a task group's exception group, and causes."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        if current.__cause__ is not None:
            pending.append(current.__cause__)


def _within(filename: object, directory: Path) -> bool:
    if not isinstance(filename, str | bytes | os.PathLike):
        return False
    path = Path(os.path.abspath(os.fsdecode(filename)))
    return path.is_relative_to(os.path.abspath(directory))
