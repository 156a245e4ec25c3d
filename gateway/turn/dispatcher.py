"""The dispatcher: what happens to each message of one profile once the journal holds it.

The intake (`gateway.turn.intake`), the bus's inbound log, checks, deduplicates and journals
what channels publish; the dispatcher takes each journaled message from the bus's agent end
(`AgentHandle`) as its record goes to the disk, or from the journal when the previous run's
unfinished work is recovered, and routes it: abort triggers cancel the chat's running turn,
immediate commands answer at once, everything else waits in the chat's lane and runs as a turn.
Every answer is an outcome in the journal before it is sent; session files are written behind
it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog

from bus import AgentHandle, OutboundMessage, SessionKey, new_turn_id
from channels.base import Channel
from gateway import logs
from gateway.services import ProfileServices
from gateway.turn.commands import ChatStatus, Commands
from gateway.turn.intake import Intake, IntakeSettings
from gateway.turn.journal import (
    OPEN_SEND_STATUSES,
    Journal,
    Outcome,
    OwnerSend,
    Received,
    Recovery,
    restore_sessions,
)
from gateway.turn.lanes import (
    CommandItem,
    Commit,
    LaneItem,
    Lanes,
    QueueMode,
    SendItem,
    TurnItem,
)
from gateway.turn.outbox import Outbox, owner_reply, session_messages
from gateway.turn.outcome import Answer, TurnOutcome, reply_to_answer, stop_answer
from gateway.turn.reply import CANCELLED_NOTICE, command_reply
from gateway.turn.runner import TurnRunner
from gateway.turn.task import TurnTask
from gateway.turn.triage import triage
from sessions import SessionError, SessionManager

log = structlog.get_logger(__name__)

#: Commands after which older journal records must not be replayed into session files.
ARCHIVING_COMMANDS = frozenset({"/reset", "/delete"})


@dataclass(frozen=True, slots=True)
class DispatcherSettings:
    profile: str
    queue_mode: QueueMode
    agent_name: str
    max_backlog_per_chat: int = 256
    max_backlog: int = 10_000
    max_concurrent_turns: int = 10
    retry_after_s: float = 5.0


class Dispatcher:
    def __init__(
        self,
        settings: DispatcherSettings,
        services: ProfileServices,
        journal: Journal,
        channel_named: Callable[[str], Channel | None],
        runner: TurnRunner,
        commands: Commands,
        bus: AgentHandle[Received],
    ) -> None:
        self._settings = settings
        self._journal = journal
        self._bus = bus
        self._channel_named = channel_named
        self._runner = runner
        self._log = JournalTurnLog(journal, services.sessions, bus, self._maybe_checkpoint)
        self.outbox = Outbox(
            settings.profile,
            journal,
            self._submit_send,
            knows_channel=lambda name: channel_named(name) is not None,
            clock=time.time,
        )
        self._commands = commands
        self._sessions = services.sessions
        self._turn_slots = asyncio.Semaphore(settings.max_concurrent_turns)
        self._lanes: Lanes | None = None
        self._tasks: asyncio.TaskGroup | None = None
        self._ready = asyncio.Event()
        self._stopped = asyncio.Event()
        self._checkpoint_wanted = asyncio.Event()
        # Read when scraped, not set per message: no cost on the hot path, and never stale (a
        # reloaded profile's dispatcher takes its place under the same labels).
        depth = services.metrics.queue_depth
        depth.labels(settings.profile, "inbound").set_function(lambda: len(journal.state.received))
        depth.labels(settings.profile, "outbound").set_function(self._bus.outbound_depth)
        self.intake = Intake(
            IntakeSettings(
                settings.profile,
                settings.max_backlog_per_chat,
                settings.max_backlog,
                settings.retry_after_s,
            ),
            services,
            journal,
            channel_named,
            outbound=bus,
            after_durable=self._after_durable,
        )

    # Lifecycle

    async def run(self, recovery: Recovery) -> None:
        """Dispatch until `stop_intake`, then finish what runs and waits (within the daemon's
        grace period; whatever is cut off stays in the journal and runs at the next start)."""
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            self._lanes = Lanes(self._settings.queue_mode, self._run_item, tasks, self._dropped)
            await self._recover(recovery)
            self.intake.open()
            scheduled = tasks.create_task(
                self.outbox.run(), name=f"scheduled-sends:{self._settings.profile}"
            )
            routing = tasks.create_task(
                self._route_published(), name=f"inbound-routing:{self._settings.profile}"
            )
            self._ready.set()
            checkpoints = tasks.create_task(
                self._checkpoint_loop(), name=f"journal-checkpoints:{self._settings.profile}"
            )
            await self._stopped.wait()
            await routing
            await self._lanes.wait_idle()
            scheduled.cancel()
            checkpoints.cancel()

    async def wait_ready(self) -> None:
        """Until what the previous run left unfinished has been taken up again."""
        await self._ready.wait()

    def stop_intake(self) -> None:
        """Take no more messages; what is running or waiting still finishes."""
        self.intake.close()
        self._bus.stop_receiving()
        self._stopped.set()

    def busy(self) -> bool:
        return self._lanes is not None and len(self._lanes) > 0

    async def _recover(self, recovery: Recovery) -> None:
        if recovery.fixups:
            await restore_sessions(self._sessions, recovery.fixups)
        for outcome in recovery.fixups:
            self._journal.record_written(outcome.turn)
        replies: list[OutboundMessage] = []
        for outcome in recovery.undelivered:
            assert outcome.reply is not None
            replies.append(outcome.reply)
        # Not awaited one by one: a channel whose platform is down must not hold the start.
        await self._bus.send_in_order(replies)
        for received in recovery.pending:
            self._route(received)
        self.outbox.recover()
        if recovery.pending or recovery.undelivered:
            log.info(
                "dispatcher.resumed",
                profile=self._settings.profile,
                turns=len(recovery.pending),
                replies=len(recovery.undelivered),
            )

    async def _checkpoint_loop(self) -> None:
        while True:
            await self._checkpoint_wanted.wait()
            self._checkpoint_wanted.clear()
            if not self._journal.wants_checkpoint():
                continue  # asked for while the last checkpoint ran, which has answered it
            try:
                await self.checkpoint()
            except SessionError:
                # Supervision point: a session file the disk refused keeps the journal whole
                # (nothing is cut); the next checkpoint tries again.
                log.exception("dispatcher.checkpoint_failed", profile=self._settings.profile)

    async def checkpoint(self) -> None:
        await self._journal.checkpoint(self._sessions.store.sync)

    def _maybe_checkpoint(self) -> None:
        if self._journal.wants_checkpoint():
            self._checkpoint_wanted.set()

    def _after_durable(self) -> None:
        self._maybe_checkpoint()

    # Routing (synchronous: runs as soon as a message is journaled, live or on recovery)

    async def _route_published(self) -> None:
        """Every message the bus brings, until it takes no more and what it queued is routed."""
        async for received in self._bus:
            self._route(received)

    def _route(self, received: Received) -> None:
        assert self._lanes is not None
        message = received.message
        routes = self._runner.routes
        if routes.has_prefixes:
            message = routes.addressed(message)
            if message is not received.message:
                # A prefix route's text: the prefix is off before triage and the agent read it.
                received = Received(received.id, message, received.at)
        chat = message.session_key(self._settings.profile)
        lane = chat.base_key()
        triaged = triage(message.content)
        if triaged.kind == "stop":
            self._lanes.abort(lane)
            self._spawn(self._answer_stop(received, chat), name=f"answer:{received.id}")
        elif triaged.kind == "immediate":
            self._spawn(
                self._run_immediate(received, chat, triaged.command, triaged.argument),
                name=f"command:{lane}",
            )
        elif triaged.kind == "command":
            self._lanes.submit(lane, CommandItem(received))
        else:
            self._lanes.submit(lane, TurnItem((received,)))

    def _submit_send(self, send: OwnerSend) -> None:
        """A due send waits in its chat's lane behind the turns already there."""
        assert self._lanes is not None
        chat = SessionKey.for_chat(self._settings.profile, send.channel, send.chat_id)
        self._lanes.submit(chat.base_key(), SendItem(send))

    def _spawn(self, work: Coroutine[Any, Any, None], *, name: str) -> None:
        assert self._tasks is not None
        self._tasks.create_task(work, name=name)

    async def _answer_stop(self, received: Received, chat: SessionKey) -> None:
        key = await self._commands.current_key(chat)
        await self._commit([received], stop_answer(received.message, key))

    async def _run_immediate(
        self, received: Received, chat: SessionKey, name: str, arg: str
    ) -> None:
        text = await command_reply(name, self._immediate_text(chat, name, arg))
        await self._commit([received], Answer.said(await self._commands.current_key(chat), text))

    async def _immediate_text(self, chat: SessionKey, name: str, arg: str) -> str:
        status = await self.status_of(await self._commands.current_key(chat))
        return await self._commands.run(chat, name, arg, status=status)

    def _dropped(self, items: list[LaneItem]) -> None:
        """Messages an abort or an interrupt took away: answered by nothing, except on
        channels where a request waits for them (the HTTP API), which are told at once."""
        unanswered = self._journal.state.received
        for item in items:
            if isinstance(item, SendItem):
                continue  # never dropped (`Lanes.abort`)
            ids = [i for i in item.ids if i in unanswered]
            if not ids:
                continue
            trigger = item.trigger.message
            channel = self._channel_named(trigger.channel)
            if channel is not None and channel.replies_to_retries:
                waiting = [r for r in _received_of(item) if r.id in ids]
                self._spawn(self._answer_cancelled(waiting), name=f"cancelled:{ids[0]}")
                continue
            self._journal.record_outcome(
                Outcome(
                    turn=str(new_turn_id()),
                    answers=ids,
                    session=str(trigger.session_key(self._settings.profile)),
                    messages=[],
                    reply=None,
                )
            )

    async def _answer_cancelled(self, waiting: list[Received]) -> None:
        chat = waiting[-1].message.session_key(self._settings.profile)
        key = await self._commands.current_key(chat)
        notice = Answer(CANCELLED_NOTICE, key, [], is_turn=False, failed=True)
        await self._commit(waiting, notice)

    # Running an item (in its lane's task: the work, then its commit, which an abort spares)

    async def _run_item(self, item: LaneItem) -> Commit | None:
        if isinstance(item, SendItem):
            # No work to cancel: straight to its commit, which a stop spares.
            return partial(self._send_owner, item.send)
        trigger = item.trigger.message
        chat = trigger.session_key(self._settings.profile)
        if isinstance(item, CommandItem):
            return await self._run_command(item, chat)
        key = await self._commands.current_key(chat)
        async with self._turn_slots:
            # What waits may have been deleted by its sender meanwhile (`Intake`): no turn for
            # it. From here on the turn has started: an edit no longer replaces its text.
            unanswered = self._journal.state.received
            received = [r for r in item.received if r.id in unanswered]
            if not received:
                return None
            answers = [r.id for r in received]
            # A turn cut off by a crash after its reply began streaming runs again under its
            # id: its stream finishes the messages it opened instead of adding new ones.
            turn_id = self._journal.resumed_turn(answers) or str(new_turn_id())
            self._journal.start_turn(turn_id, answers)
            channel = self._channel_named(trigger.channel)
            answer = await self._runner.answer(
                key,
                [r.message for r in received],
                stream_id=turn_id,
                streams=channel is not None and channel.supports_edit(),
                shows_typing=channel is not None and channel.shows_typing(),
            )
        return partial(self._commit, received, answer, turn_id)

    async def _run_command(self, item: CommandItem, chat: SessionKey) -> Commit | None:
        if item.received.id not in self._journal.state.received:
            return None  # deleted by its sender while it waited
        command = triage(item.received.message.content)
        name = command.command
        text = await command_reply(name, self._commands.run(chat, name, command.argument))

        async def commit() -> None:
            # The session the command leaves the chat in (`/new` opens another).
            key = await self._commands.current_key(chat)
            await self._commit([item.received], Answer.said(key, text))
            if name in ARCHIVING_COMMANDS:
                # Older outcomes must never be replayed into the session just archived.
                await self.checkpoint()

        return commit

    async def _commit(
        self, received: Sequence[Received], answer: Answer, turn_id: str | None = None
    ) -> None:
        """The outcome recorded (the session written behind it), then the reply sent."""
        unanswered = self._journal.state.received
        if not any(r.id in unanswered for r in received):
            return  # an abort or an interrupt got there first
        turn = turn_id or str(new_turn_id())
        reply = reply_to_answer([r.message for r in received], answer, turn, streamed=True)
        await self._log.record(TurnOutcome(turn, received, answer, reply))
        await self._log.deliver(reply)

    async def _send_owner(self, send: OwnerSend) -> None:
        """A due send recorded as an outcome (its text in the chat's current session), then
        delivered as a turn's reply is."""
        chat = SessionKey.for_chat(self._settings.profile, send.channel, send.chat_id)
        key = await self._commands.current_key(chat)
        if send.status not in OPEN_SEND_STATUSES or send.turn is not None:
            return  # cancelled while it waited
        turn = str(new_turn_id())
        self.outbox.recorded(send, turn)
        reply = owner_reply(send, key, turn)
        answer = Answer(send.text, key, session_messages(send), is_turn=False)
        await self._log.record(TurnOutcome(turn, (), answer, reply))
        await self._log.deliver(reply)

    async def status_of(self, key: SessionKey) -> ChatStatus:
        lanes = self._lanes
        busy = lanes is not None and lanes.busy(key.base_key())
        return ChatStatus(
            busy=busy, queue_mode=self._settings.queue_mode, agent=self._settings.agent_name
        )


@dataclass(frozen=True, slots=True)
class JournalTurnLog:
    """The single process's `TurnLog`: an outcome record in the profile's journal, the session
    file written behind it (synced at the journal's checkpoints), the reply on the bus."""

    journal: Journal
    sessions: SessionManager
    bus: AgentHandle[Received]
    after_delivery: Callable[[], None]

    async def record(self, outcome: TurnOutcome[Received]) -> None:
        answer, turn = outcome.answer, outcome.turn_id
        recorded = Outcome(
            turn=turn,
            answers=[r.id for r in outcome.answered],
            session=str(answer.session_key),
            messages=answer.messages,
            reply=outcome.reply,
            task=TurnTask.of(turn, answer),
        )
        await self.journal.record_outcome(recorded)
        if not answer.messages:
            self.journal.record_written(turn)
            return
        try:
            await self.sessions.append_all(
                answer.session_key, answer.messages, lines=recorded.session_lines()
            )
        except Exception:
            # Supervision point: the journal keeps the messages and replays them into the
            # session file at the next start; the reply still goes out.
            log.exception("dispatcher.session_write_failed", session=str(answer.session_key))
        else:
            self.journal.record_written(turn)
        if answer.is_turn and logs.debug_enabled:
            log.debug("turn.done", session=str(answer.session_key), tokens=answer.usage.total)

    async def deliver(self, reply: OutboundMessage) -> None:
        await self.bus.send(reply)
        self.after_delivery()


def _received_of(item: TurnItem | CommandItem) -> tuple[Received, ...]:
    return item.received if isinstance(item, TurnItem) else (item.received,)
