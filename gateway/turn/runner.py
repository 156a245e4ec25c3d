"""One agent turn: history in, streamed snapshots out, the reply (or the failure) returned.

The runner does not store anything: the dispatcher records the turn's outcome in the journal
(durable before the reply is sent) and writes the session behind it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import structlog

from bus import (
    InboundMessage,
    Message,
    OutboundEvent,
    SessionKey,
    StreamSnapshot,
    TokenUsage,
    TypingStarted,
    TypingStopped,
)
from channels.participants import chat_of, sender_of
from gateway import logs
from gateway.agents import Agent, AgentError, AgentTurn, SnapshotSink
from gateway.agents.transcription import Transcriber
from gateway.services import ProfileServices
from gateway.turn.media import prepare_message
from gateway.turn.reply import reply_message

log = structlog.get_logger(__name__)


class OutboundSink(Protocol):
    """Where a turn's snapshots and typing signals go: the bus (`AgentHandle`), or in a
    cluster the ingress holding the chat (`gateway.cluster.live`)."""

    async def send(self, event: OutboundEvent) -> None: ...


@dataclass(frozen=True, slots=True)
class TurnResult:
    user_message: Message
    reply: str
    usage: TokenUsage
    #: True when `reply` is an apology for a failed turn rather than an answer.
    failed: bool = False
    error: str | None = None


class TurnRunner:
    """Runs turns for one profile; the caller serialises turns per chat."""

    def __init__(self, services: ProfileServices, agent: Agent) -> None:
        self._profile = services.profile
        self._max_history = services.config.sessions.max_history
        self._agent = agent
        self._sessions = services.sessions
        self._outbound = services.outbound
        self._transcriber = Transcriber(services.config.transcription)
        profile, metrics = services.profile, services.metrics
        self._turns_ok = metrics.turns.labels(profile, "ok")
        self._turns_failed = metrics.turns.labels(profile, "agent_error")
        self._turn_latency = metrics.turn_latency.labels(profile)

    async def run(
        self,
        key: SessionKey,
        trigger: InboundMessage,
        content: str,
        answers: list[str],
        *,
        stream_id: str,
        streams: bool,
        shows_typing: bool = True,
        outbound: OutboundSink | None = None,
    ) -> TurnResult:
        """Answer `content` (one message, or several collected) in the chat `trigger` came from.

        `answers` are the platform ids of the messages this turn answers; snapshots of the
        growing reply are sent only when the channel can show them (`streams`), and typing
        signals only to a channel that shows typing, to `outbound` (default: the runner's bus).
        """
        sink: OutboundSink = self._outbound if outbound is None else outbound
        started = time.perf_counter()
        if logs.debug_enabled:
            log.debug("turn.started", session=str(key), stream=stream_id)
        if shows_typing:
            await sink.send(TypingStarted(trigger.channel, trigger.chat_id))
        user_message = Message.user(content, media=list(trigger.media))
        try:
            prepared = await prepare_message(trigger, content, self._transcriber)
            user_message = Message.user(prepared.content, media=list(trigger.media))
            history = await self._sessions.history(key, self._max_history)
            turn = AgentTurn(
                profile=self._profile,
                session_key=key,
                history=history,
                message=user_message,
                attachments=prepared.attachments,
                transcripts=prepared.transcripts,
                sender=sender_of(trigger),
                chat=chat_of(trigger),
            )
            show_snapshot: SnapshotSink = _show_nothing
            if streams:
                session = str(key)

                async def show_snapshot(text: str) -> None:
                    reply_so_far = reply_message(
                        trigger,
                        text,
                        answers=answers,
                        session=session,
                        delivery_id=stream_id,
                        stream_id=stream_id,
                    )
                    await sink.send(StreamSnapshot(reply_so_far))

            reply = await self._agent.run(turn, show_snapshot)
        except AgentError as error:
            log.error("turn.agent_failed", session=str(key), error=str(error))
            self._turns_failed.inc()
            return TurnResult(
                user_message, error.user_message, TokenUsage(), failed=True, error=str(error)
            )
        except BaseException:
            # Cancelled (abort, interrupt, shutdown): the typing indicator must not linger.
            if shows_typing:
                await sink.send(TypingStopped(trigger.channel, trigger.chat_id))
            raise
        self._turns_ok.inc()
        self._turn_latency.observe(time.perf_counter() - started)
        return TurnResult(user_message, reply.content, reply.usage)


async def _show_nothing(text: str) -> None:
    """The snapshot sink of a turn whose channel cannot show a growing reply."""
