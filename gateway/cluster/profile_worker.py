"""One profile's agent side in a cluster worker: agent, sessions in PostgreSQL, commands.

What the single-process dispatcher does with a journaled message, this does with one from the
inbound stream, with the same pieces (the turn core's triage and replies, `TurnRunner`,
`Commands`): a stop is answered in the user's language, a command runs, anything else is an
agent turn over the session's history. Messages of a chat that `queue_mode: collect` joined
arrive together and are one turn, their texts joined as the single process's lanes join them.
A turn's snapshots, typing signals and reactions go to the ingress that took its message in
(`live`, from `gateway.cluster.live`), when its channel shows them, as in one process. Ordering,
exactly-once, the queue modes and cancelling a turn on a stop are the worker's
(`gateway.cluster.worker`, `gateway.cluster.chat_queue`); this only answers.

The worker sees a profile as a `ProfileWorker` (`WorkerProfile` here): its queue mode, its answer
to a chat's messages, and the transactions its answer is stored in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import structlog

from bus import InboundMessage, Message, SessionKey
from channels.media_links import MediaLinks
from config import ProfileConfig
from config.store import StoreConfig
from gateway.agents import open_agents
from gateway.cluster.live import LiveTurn
from gateway.metrics import GatewayMetrics
from gateway.services import ProfileServices
from gateway.turn.commands import ChatStatus, Commands
from gateway.turn.outcome import Answer, stop_answer
from gateway.turn.reply import command_reply
from gateway.turn.runner import TurnRunner
from gateway.turn.triage import triage
from sessions import SessionManager
from sessions.backends import active_topics, postgres_store, session_store

if TYPE_CHECKING:
    from sessions.postgres import PostgresSessionStore
    from sessions.postgres.connect import Connection


class ProfileWorker(Protocol):
    """One profile's agent side, as the worker uses it (`WorkerProfile` below)."""

    @property
    def config(self) -> ProfileConfig:
        """The profile's settings: its queue mode, edits and buttons are the worker's to
        apply."""
        ...

    async def answer(
        self, messages: Sequence[InboundMessage], turn_id: str, live: LiveTurn | None = None
    ) -> Answer:
        """The answer to `messages`: one, or several of a chat collected into one turn;
        `live`: where the turn shows its snapshots, typing and reactions (None: nowhere)."""
        ...

    def effect_transaction(
        self, message: InboundMessage
    ) -> AbstractAsyncContextManager[Connection | None]:
        """For a message whose answer changes chat state (a command), the transaction its
        effect and its stored reply commit in; None for the others (an agent turn's messages
        are stored with its reply, and no transaction is held across the agent's call)."""
        ...

    def turn_transaction(self) -> AbstractAsyncContextManager[Connection]:
        """A transaction of the profile's session store, that `append` joins: a turn's stored
        reply and its session messages commit in it together (a savepoint inside a command's
        `effect_transaction`)."""
        ...

    async def append(self, session_key: str, messages: Sequence[Message]) -> None:
        """Append to the session (idempotent), inside `turn_transaction` when in one."""
        ...

    async def current_session(self, channel: str, chat_id: str) -> SessionKey:
        """The chat's session now (its topic), where an owner's send is appended."""
        ...


log = structlog.get_logger(__name__)


class WorkerProfile:
    def __init__(
        self,
        services: ProfileServices,
        runner: TurnRunner,
        commands: Commands,
        store: PostgresSessionStore,
    ) -> None:
        self.profile_id = services.profile
        self._config = services.config
        self._runner = runner
        self._commands = commands
        self._sessions = services.sessions
        self._store = store

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    @property
    def config(self) -> ProfileConfig:
        return self._config

    @asynccontextmanager
    async def effect_transaction(self, message: InboundMessage) -> AsyncIterator[Connection | None]:
        """A command's effect (topics, sessions) and its reply commit together: a worker killed
        between them would otherwise run `/back` or an unnamed `/new` twice."""
        if not triage(self._runner.routes.addressed(message).content).command:
            yield None
            return
        async with self._store.transaction() as connection:
            yield connection

    async def answer(
        self, messages: Sequence[InboundMessage], turn_id: str, live: LiveTurn | None = None
    ) -> Answer:
        # A prefix route's text: the prefix is off before triage and the agent read it.
        messages = [self._runner.routes.addressed(message) for message in messages]
        message = messages[-1]
        chat = message.session_key(self.profile_id)
        # Whatever this process remembers of the chat may be stale: its previous turns, a
        # `/reset` or a `/delete` may have run on another worker since.
        self._sessions.evict_chat(chat.base_key())
        key = await self._commands.current_key(chat)
        triaged = triage(message.content)
        if triaged.kind == "stop":
            # The turn it stops was cancelled by its notice, or ran before it: say stopped.
            return stop_answer(message, key)
        if triaged.command:
            return await self._command(chat, key, triaged.command, triaged.argument)
        return await self._runner.answer(
            key,
            messages,
            stream_id=turn_id,
            streams=live is not None and live.streams,
            shows_typing=live is not None and live.shows_typing,
            outbound=live,
        )

    async def _command(self, chat: SessionKey, key: SessionKey, name: str, arg: str) -> Answer:
        # Busy is what the chat's partition says: this message runs, so no turn of it does.
        agent = self._config.agent_summary()
        status = ChatStatus(busy=False, queue_mode=self._config.queue_mode, agent=agent)
        text = await command_reply(name, self._run_in_savepoint(chat, name, arg, status))
        log.debug("cluster.command_answered", command=name, session=str(key))
        return Answer.said(key, text)

    async def _run_in_savepoint(
        self, chat: SessionKey, name: str, arg: str, status: ChatStatus
    ) -> str:
        # A savepoint inside `effect_transaction`: a command that fails changes nothing.
        async with self._store.transaction():
            return await self._commands.run(chat, name, arg, status=status)

    def turn_transaction(self) -> AbstractAsyncContextManager[Connection]:
        return self._store.transaction()

    async def current_session(self, channel: str, chat_id: str) -> SessionKey:
        chat = SessionKey.for_chat(self.profile_id, channel, chat_id)
        self._sessions.evict_chat(chat.base_key())  # another worker may have switched it
        return await self._commands.current_key(chat)

    async def append(self, session_key: str, messages: Sequence[Message]) -> None:
        await self._sessions.append_all(SessionKey.parse(session_key), list(messages))


@asynccontextmanager
async def worker_profile(
    profile_id: str,
    config: ProfileConfig,
    data_dir: Path,
    store: StoreConfig,
    metrics: GatewayMetrics,
    *,
    media_links: MediaLinks | None = None,
) -> AsyncIterator[WorkerProfile]:
    """The profile's agent and sessions, open for the worker; closed on the way out.
    `media_links`: the process's, for the links a webhook agent is sent."""
    root = data_dir / profile_id
    settings = config.sessions
    async with AsyncExitStack() as stack:
        sessions_store = await stack.enter_async_context(session_store(store, root))
        agents = await stack.enter_async_context(open_agents(config, media_links=media_links))
        sessions = SessionManager(sessions_store, max_open=settings.max_open)
        # In the same database as the sessions: a `/new` on one worker holds on every worker.
        topics = active_topics(store, root, sessions_store)
        await topics.load()
        services = ProfileServices(profile_id, config, sessions, topics, metrics, root)
        yield WorkerProfile(
            services,
            # Each turn names where it shows its snapshots, typing and reactions: its own
            # `LiveTurn`.
            TurnRunner(services, agents),
            Commands(services),
            postgres_store(sessions_store),
        )
