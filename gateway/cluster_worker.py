"""One profile's agent side in a cluster worker: agent, sessions in PostgreSQL, commands.

What the single-process dispatcher does with a journaled message, this does with one from the
inbound stream, with the same pieces (the turn core's triage and replies, `TurnRunner`,
`Commands`): a stop is answered in the user's language, a command runs, anything else is an
agent turn over the session's history. Messages of a chat that `queue_mode: collect` joined
arrive together and are one turn, their texts joined as the single process's lanes join them.
A turn's snapshots and typing signals go to the ingress that took its message in (`live`, from
`cluster.live`), when its channel shows them, as in one process. Ordering, exactly-once, the
queue modes and cancelling a turn on a stop are the worker's (`cluster.worker`,
`cluster.chat_queue`, `cluster.cancels`); this only answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from bus import InboundMessage, Message, SessionKey, create_bus
from bus.abort import abort_response
from cluster.answer import Answer
from cluster.live import LiveTurn
from config import ProfileConfig
from config.profile import QueueMode
from config.store import StoreConfig
from gateway.agents import create_agent
from gateway.metrics import GatewayMetrics
from gateway.services import ProfileServices
from gateway.turn.commands import ChatStatus, Commands
from gateway.turn.lanes import collected_content
from gateway.turn.reply import command_reply, platform_ids
from gateway.turn.runner import TurnRunner
from gateway.turn.triage import triage
from sessions import SessionManager
from sessions.backends import active_topics, postgres_store, session_store

if TYPE_CHECKING:
    from sessions.postgres import PostgresSessionStore
    from sessions.postgres.connect import Connection

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
    def queue_mode(self) -> QueueMode:
        return self._config.queue_mode

    @asynccontextmanager
    async def effect_transaction(self, message: InboundMessage) -> AsyncIterator[Connection | None]:
        """A command's effect (topics, sessions) and its reply commit together: a worker killed
        between them would otherwise run `/back` or an unnamed `/new` twice."""
        if not triage(message.content).command:
            yield None
            return
        async with self._store.transaction() as connection:
            yield connection

    async def answer(
        self, messages: Sequence[InboundMessage], turn_id: str, live: LiveTurn | None = None
    ) -> Answer:
        message = messages[-1]
        chat = message.session_key(self.profile_id)
        # Whatever this process remembers of the chat may be stale: its previous turns, a
        # `/reset` or a `/delete` may have run on another worker since.
        self._sessions.evict_chat(chat.base_key())
        key = await self._commands.current_key(chat)
        triaged = triage(message.content)
        if triaged.kind == "stop":
            # The turn it stops was cancelled by its notice, or ran before it: say stopped.
            return Answer(abort_response(message.content), str(key), [], is_turn=False)
        if triaged.command:
            return await self._command(chat, key, triaged.command, triaged.argument)
        result = await self._runner.run(
            key,
            message,
            collected_content([m.content for m in messages]),
            platform_ids(messages),
            stream_id=turn_id,
            streams=live is not None and live.streams,
            shows_typing=live is not None and live.shows_typing,
            outbound=live,
        )
        if result.failed:
            return Answer(result.reply, str(key), [], failed=True, error=result.error)
        messages_added = [result.user_message, Message.assistant(result.reply)]
        return Answer(result.reply, str(key), messages_added, usage=result.usage)

    async def _command(self, chat: SessionKey, key: SessionKey, name: str, arg: str) -> Answer:
        # Busy is what the chat's partition says: this message runs, so no turn of it does.
        status = ChatStatus(busy=False, queue_mode=self.queue_mode, agent=self._config.agent.type)
        text = await command_reply(name, self._run_in_savepoint(chat, name, arg, status))
        log.debug("cluster.command_answered", command=name, session=str(key))
        return Answer(text, str(key), [], is_turn=False)

    async def _run_in_savepoint(
        self, chat: SessionKey, name: str, arg: str, status: ChatStatus
    ) -> str:
        # A savepoint inside `effect_transaction`: a command that fails changes nothing.
        async with self._store.transaction():
            return await self._commands.run(chat, name, arg, status=status)

    def turn_transaction(self) -> AbstractAsyncContextManager[Connection]:
        return self._store.transaction()

    async def append(self, session_key: str, messages: Sequence[Message]) -> None:
        await self._sessions.append_all(SessionKey.parse(session_key), list(messages))


@asynccontextmanager
async def worker_profile(
    profile_id: str,
    config: ProfileConfig,
    data_dir: Path,
    store: StoreConfig,
    metrics: GatewayMetrics,
) -> AsyncIterator[WorkerProfile]:
    """The profile's agent and sessions, open for the worker; closed on the way out."""
    root = data_dir / profile_id
    settings = config.sessions
    async with AsyncExitStack() as stack:
        sessions_store = await stack.enter_async_context(session_store(store, root))
        agent = await stack.enter_async_context(create_agent(config.agent))
        sessions = SessionManager(sessions_store, max_open=settings.max_open)
        # In the same database as the sessions: a `/new` on one worker holds on every worker.
        topics = active_topics(store, root, sessions_store)
        await topics.load()
        # A cluster turn sends its snapshots and typing to its own `LiveTurn`: the runner's
        # outbound side is a bus nobody reads.
        handle, _publisher = create_bus(1)
        services = ProfileServices(profile_id, config, sessions, topics, handle, metrics)
        yield WorkerProfile(
            services,
            TurnRunner(services, agent),
            Commands(services),
            postgres_store(sessions_store),
        )
