"""One agent turn: history in, streamed snapshots out, both messages durable before the reply."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

import structlog

from bus import (
    ANSWERS,
    FAILED,
    SESSION,
    AgentHandle,
    InboundMessage,
    Message,
    OutboundMessage,
    SessionKey,
    new_turn_id,
)
from gateway.agents import Agent, AgentError, AgentReply, AgentTurn
from gateway.metrics import GatewayMetrics
from sessions import SessionManager

log = structlog.get_logger(__name__)


class Show(Protocol):
    async def __call__(self, text: str, *, final: bool, failed: bool = False) -> None: ...


@dataclass(frozen=True, slots=True)
class TurnSettings:
    profile: str
    max_history: int


class TurnRunner:
    """Runs turns for one profile; the caller serialises turns per session."""

    def __init__(
        self,
        settings: TurnSettings,
        agent: Agent,
        sessions: SessionManager,
        outbound: AgentHandle,
        metrics: GatewayMetrics,
    ) -> None:
        self._settings = settings
        self._agent = agent
        self._sessions = sessions
        self._outbound = outbound
        self._metrics = metrics

    async def append(self, key: SessionKey, message: Message) -> None:
        started = time.perf_counter()
        await self._sessions.append(key, message)
        self._metrics.session_append_latency.labels(self._settings.profile).observe(
            time.perf_counter() - started
        )

    async def run(
        self, key: SessionKey, trigger: InboundMessage, content: str, answers: list[str]
    ) -> None:
        """Answer `content` (one message, or several collected) in the chat `trigger` came from.

        `answers` are the platform ids of the messages this turn answers.
        """
        metadata: dict[str, object] = {ANSWERS: answers, SESSION: str(key)}
        started = time.perf_counter()
        stream_id = str(new_turn_id())
        log.debug("turn started", session=str(key), stream=stream_id)
        await self._outbound.send(OutboundMessage.typing(trigger.channel, trigger.chat_id))
        history = await self._sessions.history(key, self._settings.max_history)
        user_message = Message.user(content, media=list(trigger.media))

        async def show(text: str, *, final: bool, failed: bool = False) -> None:
            extra = {**metadata, FAILED: True} if failed else metadata
            await self._outbound.send(self._reply(trigger, text, stream_id, extra, final=final))

        turn = AgentTurn(
            profile=self._settings.profile, session_key=key, history=history, message=user_message
        )
        # The user's message is made durable while the agent thinks, not before it starts: the
        # reply below waits for both, so nothing is acknowledged that is not on disk.
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.append(key, user_message), name=f"store-user-message:{key}")
            reply = await self._answer(trigger, turn, show)
        if reply is None:
            return
        await self.append(key, Message.assistant(reply.content))
        await show(reply.content, final=True)
        self._metrics.turns.labels(self._settings.profile, "ok").inc()
        self._metrics.turn_latency.labels(self._settings.profile).observe(
            time.perf_counter() - started
        )
        log.debug("turn done", session=str(key), tokens=reply.usage.total)

    async def _answer(
        self, trigger: InboundMessage, turn: AgentTurn, show: Show
    ) -> AgentReply | None:
        """The agent's reply, or None when it failed and the user was told so."""

        async def show_snapshot(text: str) -> None:
            await show(text, final=False)

        try:
            return await self._agent.run(turn, show_snapshot)
        except AgentError as error:
            log.error("agent turn failed", session=str(turn.session_key), error=str(error))
            self._metrics.turns.labels(self._settings.profile, "agent_error").inc()
            await show(error.user_message, final=True, failed=True)
            return None
        except BaseException:
            # Cancelled (abort, interrupt, shutdown): the typing indicator must not linger.
            await self._outbound.send(
                OutboundMessage.typing(trigger.channel, trigger.chat_id, active=False)
            )
            raise

    @staticmethod
    def _reply(
        trigger: InboundMessage,
        text: str,
        stream_id: str,
        metadata: dict[str, object],
        *,
        final: bool,
    ) -> OutboundMessage:
        return OutboundMessage(
            metadata=metadata,
            channel=trigger.channel,
            chat_id=trigger.chat_id,
            content=text,
            reply_to=trigger.message_id,
            stream_id=stream_id,
            stream_final=final,
        )
