"""The dispatcher: what happens to each inbound message of one profile.

In order: the channel's allow list (a stranger gets at most one "your id is ..." notice an hour
and the agent never sees them), dedup by platform message id, abort triggers (cancel the running
turn at once, answer in the trigger's language), commands, then the chat's lane, which runs turns
one at a time through the session actors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from bus import AgentHandle, InboundMessage, OutboundMessage, SessionKey
from bus.abort import abort_response, is_abort_trigger
from channels.base import Channel
from channels.dedup import InboundDedup
from gateway.commands import IMMEDIATE, ChatStatus, Commands, parse_command
from gateway.lanes import CommandItem, LaneItem, Lanes, QueueMode, TurnItem
from gateway.metrics import GatewayMetrics
from gateway.turns import TurnRunner
from sessions import SessionActors

log = structlog.get_logger(__name__)

REFUSAL_NOTICE = (
    "Sorry, this bot does not know you yet. Your id is {sender_id}: ask its owner to add it "
    "to the allow list."
)
QUEUE_FULL_NOTICE = "Still working on your earlier messages; please wait for the reply."
REFUSAL_NOTICE_INTERVAL_S = 3600.0


@dataclass(frozen=True, slots=True)
class DispatcherSettings:
    profile: str
    queue_mode: QueueMode
    agent_name: str


class Dispatcher:
    #: What to tell a refused sender instead of the plain notice (a pairing code); None: plain.
    stranger_notice: Callable[[InboundMessage], Awaitable[str | None]] | None = None

    def __init__(
        self,
        settings: DispatcherSettings,
        handle: AgentHandle,
        channel_named: Callable[[str], Channel | None],
        runner: TurnRunner,
        commands: Commands,
        actors: SessionActors,
        metrics: GatewayMetrics,
    ) -> None:
        self._settings = settings
        self._handle = handle
        self._channel_named = channel_named
        self._runner = runner
        self._commands = commands
        self._actors = actors
        self._metrics = metrics
        self._dedup = InboundDedup(max_entries=10_000, ttl_s=600.0)
        self._refusals = InboundDedup(max_entries=10_000, ttl_s=REFUSAL_NOTICE_INTERVAL_S)
        self._intake: asyncio.Task[None] | None = None
        self._stop_requested = False
        self._waiting_for_message = False
        self._lanes: Lanes | None = None

    async def run(self) -> None:
        """Dispatch until the bus closes or `stop_intake` is called, then finish queued work."""
        async with asyncio.TaskGroup() as tasks:
            self._lanes = Lanes(self._settings.queue_mode, self._run_item, tasks)
            self._intake = tasks.create_task(
                self._intake_loop(), name=f"intake:{self._settings.profile}"
            )
            await asyncio.wait([self._intake])
            await self._lanes.wait_idle()

    def stop_intake(self) -> None:
        """Take no more messages; turns already running or queued still finish.

        Only a wait for the next message is cancelled: a message being dispatched is seen
        through, so none is lost between the bus and its lane.
        """
        self._stop_requested = True
        if self._intake is not None and self._waiting_for_message:
            self._intake.cancel()

    def busy(self) -> bool:
        return self._lanes is not None and len(self._lanes) > 0

    async def _intake_loop(self) -> None:
        while not self._stop_requested:
            self._waiting_for_message = True
            try:
                message = await self._handle.recv()
            finally:
                self._waiting_for_message = False
            if message is None:
                return
            with structlog.contextvars.bound_contextvars(
                profile=self._settings.profile, channel=message.channel, chat=message.chat_id
            ):
                try:
                    await self.dispatch(message)
                except Exception:
                    # Supervision point (per message): log it and keep dispatching.
                    log.exception("dispatching a message failed")
            depth = self._metrics.queue_depth
            depth.labels(self._settings.profile, "inbound").set(self._handle.inbound_depth())
            depth.labels(self._settings.profile, "outbound").set(self._handle.outbound_depth())

    def _count(self, message: InboundMessage, outcome: str) -> None:
        self._metrics.messages_in.labels(self._settings.profile, message.channel, outcome).inc()

    async def dispatch(self, message: InboundMessage) -> None:
        channel = self._channel_named(message.channel)
        if channel is None:
            log.warning("message from an unknown channel dropped")
            self._count(message, "unknown_channel")
            return
        if not channel.is_allowed(message.sender_id):
            self._count(message, "refused")
            await self._refuse(message)
            return
        if message.message_id is not None and self._dedup.seen(
            f"{message.channel}:{message.chat_id}:{message.message_id}"
        ):
            self._count(message, "duplicate")
            return
        self._count(message, "accepted")
        await self._route(message)

    async def _route(self, message: InboundMessage) -> None:
        assert self._lanes is not None
        chat = message.session_key(self._settings.profile)
        lane = chat.base_key()
        if is_abort_trigger(message.content):
            self._lanes.abort(lane)
            await self.reply(message, abort_response(message.content))
            return
        command = parse_command(message.content)
        if command is not None and command[0] in IMMEDIATE:
            name, argument = command
            if name == "/stop":
                self._lanes.abort(lane)
                await self.reply(message, abort_response("stop"))
            else:
                await self.reply(message, await self._commands.run(chat, name, argument))
            return
        item: LaneItem = CommandItem(message) if command else TurnItem((message,))
        if not self._lanes.submit(lane, item):
            await self.reply(message, QUEUE_FULL_NOTICE)

    async def _refuse(self, message: InboundMessage) -> None:
        if self._refusals.seen(f"{message.channel}:{message.sender_id}"):
            return
        log.info("refused a sender not on the allow list", sender=message.sender_id)
        notice = await self.stranger_notice(message) if self.stranger_notice else None
        await self.reply(message, notice or REFUSAL_NOTICE.format(sender_id=message.sender_id))

    async def reply(self, message: InboundMessage, text: str) -> None:
        await self._handle.send(
            OutboundMessage(
                channel=message.channel,
                chat_id=message.chat_id,
                content=text,
                reply_to=message.message_id,
            )
        )

    async def _run_item(self, item: LaneItem) -> None:
        trigger = item.trigger if isinstance(item, TurnItem) else item.message
        chat = trigger.session_key(self._settings.profile)
        key = self._commands.current_key(chat)
        if isinstance(item, TurnItem):
            answers = [m.message_id for m in item.messages if m.message_id is not None]
            await self._actors.submit(
                key, lambda: self._runner.run(key, trigger, item.content(), answers)
            )
            return
        command = parse_command(trigger.content)
        assert command is not None
        text = await self._actors.submit(key, lambda: self._commands.run(chat, *command))
        await self.reply(trigger, text)

    async def status_of(self, key: SessionKey) -> ChatStatus:
        lanes = self._lanes
        busy = lanes is not None and lanes.busy(key.base_key())
        return ChatStatus(
            busy=busy, queue_mode=self._settings.queue_mode, agent=self._settings.agent_name
        )
