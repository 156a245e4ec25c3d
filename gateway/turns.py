"""One agent turn: history in, streamed snapshots out, both messages durable before the reply."""

from __future__ import annotations

import time
from dataclasses import dataclass

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
from gateway.agents import Agent, AgentError, AgentTurn
from gateway.metrics import GatewayMetrics
from sessions import SessionManager

log = structlog.get_logger(__name__)


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
        profile = self._settings.profile
        started = time.perf_counter()
        stream_id = str(new_turn_id())
        log.debug("turn started", session=str(key), stream=stream_id)
        await self._outbound.send(OutboundMessage.typing(trigger.channel, trigger.chat_id))
        history = await self._sessions.history(key, self._settings.max_history)
        user_message = Message.user(content, media=list(trigger.media))
        await self.append(key, user_message)

        async def show_snapshot(text: str) -> None:
            await self._outbound.send(self._reply(trigger, text, stream_id, metadata, final=False))

        turn = AgentTurn(profile=profile, session_key=key, history=history, message=user_message)
        try:
            reply = await self._agent.run(turn, show_snapshot)
        except AgentError as error:
            log.error("agent turn failed", session=str(key), error=str(error))
            self._metrics.turns.labels(profile, "agent_error").inc()
            failed = {**metadata, FAILED: True}
            await self._outbound.send(
                self._reply(trigger, error.user_message, stream_id, failed, final=True)
            )
            return
        except BaseException:
            # Cancelled (abort, interrupt, shutdown): the typing indicator must not linger.
            await self._outbound.send(
                OutboundMessage.typing(trigger.channel, trigger.chat_id, active=False)
            )
            raise
        # The reply is acknowledged (sent as final) only once it is durable.
        await self.append(key, Message.assistant(reply.content))
        await self._outbound.send(
            self._reply(trigger, reply.content, stream_id, metadata, final=True)
        )
        self._metrics.turns.labels(profile, "ok").inc()
        self._metrics.turn_latency.labels(profile).observe(time.perf_counter() - started)
        log.debug("turn done", session=str(key), tokens=reply.usage.total)

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
