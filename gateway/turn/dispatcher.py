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
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import structlog

from bus import AgentHandle, Message, SessionKey, TokenUsage, new_turn_id
from bus.abort import abort_response
from channels.base import Channel
from gateway import logs
from gateway.services import ProfileServices
from gateway.turn.commands import ChatStatus, Commands
from gateway.turn.intake import Intake, IntakeSettings
from gateway.turn.journal import Journal, Outcome, Received, Recovery, restore_sessions
from gateway.turn.lanes import CommandItem, Commit, LaneItem, Lanes, QueueMode, TurnItem
from gateway.turn.reply import (
    CANCELLED_NOTICE,
    command_reply,
    failed_reply,
    failure_reason,
    platform_ids,
    reply_message,
)
from gateway.turn.runner import TurnResult, TurnRunner
from gateway.turn.task import TurnTask
from gateway.turn.triage import triage
from sessions import SessionError

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
        for outcome in recovery.undelivered:
            assert outcome.reply is not None
            await self._bus.send(outcome.reply)
        for received in recovery.pending:
            self._route(received)
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
        assert self._tasks is not None
        message = received.message
        chat = message.session_key(self._settings.profile)
        lane = chat.base_key()
        triaged = triage(message.content)
        if triaged.kind == "stop":
            self._lanes.abort(lane)
            self._spawn_answer(received, abort_response(message.content))
        elif triaged.kind == "immediate":
            self._tasks.create_task(
                self._run_immediate(received, chat, triaged.command, triaged.argument),
                name=f"command:{lane}",
            )
        elif triaged.kind == "command":
            self._lanes.submit(lane, CommandItem(received))
        else:
            self._lanes.submit(lane, TurnItem((received,)))

    def _spawn_answer(self, received: Received, text: str) -> None:
        assert self._tasks is not None
        self._tasks.create_task(
            self._answer([received], text, messages=[]), name=f"answer:{received.id}"
        )

    async def _run_immediate(
        self, received: Received, chat: SessionKey, name: str, arg: str
    ) -> None:
        text = await command_reply(name, self._immediate_text(chat, name, arg))
        await self._answer([received], text, messages=[])

    async def _immediate_text(self, chat: SessionKey, name: str, arg: str) -> str:
        status = await self.status_of(await self._commands.current_key(chat))
        return await self._commands.run(chat, name, arg, status=status)

    def _dropped(self, items: list[LaneItem]) -> None:
        """Messages an abort or an interrupt took away: answered by nothing, except on
        channels where a request waits for them (the HTTP API), which are told at once."""
        assert self._tasks is not None
        unanswered = self._journal.state.received
        for item in items:
            ids = [i for i in item.ids if i in unanswered]
            if not ids:
                continue
            trigger = item.trigger.message
            channel = self._channel_named(trigger.channel)
            if channel is not None and channel.replies_to_retries:
                waiting = [r for r in _received_of(item) if r.id in ids]
                self._tasks.create_task(
                    self._answer(waiting, CANCELLED_NOTICE, messages=[], failed=True),
                    name=f"cancelled:{ids[0]}",
                )
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

    # Running an item (in its lane's task: the work, then its commit, which an abort spares)

    async def _run_item(self, item: LaneItem) -> Commit:
        trigger = item.trigger.message
        chat = trigger.session_key(self._settings.profile)
        key = await self._commands.current_key(chat)
        if isinstance(item, CommandItem):
            return await self._run_command(item, chat)
        async with self._turn_slots:
            answers = [r.id for r in item.received]
            platform_answers = [r.message.message_id for r in item.received if r.message.message_id]
            # A turn cut off by a crash after its reply began streaming runs again under its
            # id: its stream finishes the messages it opened instead of adding new ones.
            turn_id = self._journal.resumed_turn(answers) or str(new_turn_id())
            self._journal.start_turn(turn_id, answers)
            channel = self._channel_named(trigger.channel)
            try:
                result = await self._runner.run(
                    key,
                    trigger,
                    item.content(),
                    platform_answers,
                    stream_id=turn_id,
                    streams=channel is not None and channel.supports_edit(),
                    shows_typing=channel is not None and channel.shows_typing(),
                )
            except Exception as error:
                # Supervision point (per message): the turn is answered with the reason.
                log.exception("dispatcher.turn_failed", session=str(key))
                result = TurnResult(
                    Message.user(item.content()),
                    failed_reply(error),
                    usage=TokenUsage(),
                    failed=True,
                    error=failure_reason(error),
                )
        messages = [result.user_message]
        if not result.failed:
            messages.append(Message.assistant(result.reply))
        return partial(
            self._answer,
            list(item.received),
            result.reply,
            messages=messages,
            answers=platform_answers,
            key=key,
            turn_id=turn_id,
            failed=result.failed,
            result=result,
        )

    async def _run_command(self, item: CommandItem, chat: SessionKey) -> Commit:
        command = triage(item.received.message.content)
        name = command.command
        text = await command_reply(name, self._commands.run(chat, name, command.argument))

        async def commit() -> None:
            await self._answer([item.received], text, messages=[])
            if name in ARCHIVING_COMMANDS:
                # Older outcomes must never be replayed into the session just archived.
                await self.checkpoint()

        return commit

    async def _answer(
        self,
        received: list[Received],
        text: str,
        *,
        messages: list[Message],
        answers: list[str] | None = None,
        key: SessionKey | None = None,
        turn_id: str | None = None,
        failed: bool = False,
        result: TurnResult | None = None,
    ) -> None:
        """Record the outcome, write the session behind it, then send the reply; `answers`
        are the platform ids of `received` when the caller has them already."""
        unanswered = self._journal.state.received
        if not any(r.id in unanswered for r in received):
            return  # an abort or an interrupt got there first
        trigger = received[-1].message
        session = key or await self._commands.current_key(
            trigger.session_key(self._settings.profile)
        )
        session_name = str(session)
        turn = turn_id or str(new_turn_id())
        reply = reply_message(
            trigger,
            text,
            answers=platform_ids([r.message for r in received]) if answers is None else answers,
            session=session_name,
            failed=failed,
            delivery_id=turn,
            stream_id=turn if result is not None else None,
        )
        outcome = Outcome(
            turn=turn,
            answers=[r.id for r in received],
            session=session_name,
            messages=messages,
            reply=reply,
            task=TurnTask.of(turn, result),
        )
        await self._journal.record_outcome(outcome)
        if messages:
            try:
                await self._sessions.append_all(session, messages, lines=outcome.session_lines())
            except Exception:
                # Supervision point: the journal keeps the messages and replays them into the
                # session file at the next start; the reply still goes out.
                log.exception("dispatcher.session_write_failed", session=session_name)
            else:
                self._journal.record_written(turn)
            if result is not None and logs.debug_enabled:
                log.debug("turn.done", session=session_name, tokens=result.usage.total)
        else:
            self._journal.record_written(turn)
        await self._bus.send(reply)
        self._maybe_checkpoint()

    async def status_of(self, key: SessionKey) -> ChatStatus:
        lanes = self._lanes
        busy = lanes is not None and lanes.busy(key.base_key())
        return ChatStatus(
            busy=busy, queue_mode=self._settings.queue_mode, agent=self._settings.agent_name
        )


def _received_of(item: LaneItem) -> tuple[Received, ...]:
    return item.received if isinstance(item, TurnItem) else (item.received,)
