"""One agent turn: history in, streamed snapshots out, the reply (or the failure) returned.

Before the agent runs, the runner makes the message's files ready for it (`prepare_message`):
described, and its voice messages put in words. A crash during a transcription runs it again
with the turn. The transcript (or, when there is none, a placeholder saying why) becomes the
message's text: the session stores what the agent read, and every agent, the history and
`/sessions` see words.

The runner itself stores nothing: the turn's log (`gateway.turn.outcome.TurnLog`) records its
outcome, durable before the reply is sent, and the session behind it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from bus import (
    CALLBACK,
    REPLY_TO,
    REPLY_TO_TEXT_MAX,
    InboundMessage,
    Message,
    OutboundEvent,
    OutboundSink,
    ReactionChanged,
    SessionKey,
    StreamSnapshot,
    TypingStarted,
    TypingStopped,
)
from channels.media_info import MediaInfo, chat_of, describe_media, sender_of
from gateway import logs
from gateway.agents import Agent, AgentError, AgentTurn, SnapshotSink
from gateway.agents.transcription import Transcriber, placeholder
from gateway.services import ProfileServices
from gateway.turn.lanes import collected_content
from gateway.turn.outcome import Answer
from gateway.turn.reply import failed_reply, failure_reason, platform_ids, reply_message

log = structlog.get_logger(__name__)


class TurnRunner:
    """Runs turns for one profile; the caller serialises turns per chat."""

    def __init__(
        self, services: ProfileServices, agent: Agent, outbound: OutboundSink | None = None
    ) -> None:
        """`outbound`: where turns show their snapshots and typing, unless a turn names its own
        (a cluster worker's turns each name the ingress holding their chat)."""
        self._profile = services.profile
        self._max_history = services.config.sessions.max_history
        self._agent = agent
        self._sessions = services.sessions
        self._outbound = outbound
        self._transcriber = Transcriber(services.config.transcription)
        self._working_reaction = services.config.working_reaction
        profile, metrics = services.profile, services.metrics
        self._turns_ok = metrics.turns.labels(profile, "ok")
        self._turns_failed = metrics.turns.labels(profile, "agent_error")
        self._turn_latency = metrics.turn_latency.labels(profile)

    async def answer(
        self,
        key: SessionKey,
        messages: Sequence[InboundMessage],
        *,
        stream_id: str,
        streams: bool,
        shows_typing: bool,
        outbound: OutboundSink | None = None,
    ) -> Answer:
        """The agent's answer to `messages` (one, or several of a chat collected into one
        turn), in the chat of the last; a turn that fails is answered with the reason."""
        content = collected_content([message.content for message in messages])
        try:
            return await self.run(
                key,
                messages[-1],
                content,
                platform_ids(messages),
                stream_id=stream_id,
                streams=streams,
                shows_typing=shows_typing,
                outbound=outbound,
            )
        except Exception as error:
            # Supervision point (per turn): the turn is answered with the reason.
            log.exception("turn.failed", session=str(key))
            return Answer(
                failed_reply(error),
                key,
                [Message.user(content)],
                failed=True,
                error=failure_reason(error),
            )

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
    ) -> Answer:
        """Answer `content` (one message, or several collected) in the chat `trigger` came from.

        `answers` are the platform ids of the messages this turn answers; snapshots of the
        growing reply are sent only when the channel can show them (`streams`), and typing
        signals only to a channel that shows typing, to `outbound` (default: the runner's).
        """
        # Every warning of the turn (an image the model cannot be shown, an audio the
        # transcriber rejects) names the message it is about.
        with structlog.contextvars.bound_contextvars(
            channel=trigger.channel, message_id=trigger.message_id
        ):
            return await self._answer(
                key,
                trigger,
                content,
                answers,
                stream_id=stream_id,
                streams=streams,
                shows_typing=shows_typing,
                outbound=outbound,
            )

    async def _answer(
        self,
        key: SessionKey,
        trigger: InboundMessage,
        content: str,
        answers: list[str],
        *,
        stream_id: str,
        streams: bool,
        shows_typing: bool,
        outbound: OutboundSink | None,
    ) -> Answer:
        sink = outbound or self._outbound or _SHOWN_NOWHERE
        started = time.perf_counter()
        if logs.debug_enabled:
            log.debug("turn.started", session=str(key), stream=stream_id)
        if shows_typing:
            await sink.send(TypingStarted(trigger.channel, trigger.chat_id))
        # A tap is an interaction, not a message a reaction could go on.
        reactable = trigger.shown_id() is not None and CALLBACK not in trigger.metadata
        working = self._working_reaction if reactable else None
        if working:
            await sink.send(_reaction(trigger, working))
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
                callback=callback_of(trigger),
                reply_to=reply_to_of(trigger),
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
            if working:
                await sink.send(_reaction(trigger, working, removed=True))
            return Answer(error.user_message, key, [user_message], failed=True, error=str(error))
        except BaseException:
            # Cancelled (abort, interrupt, shutdown): the typing indicator must not linger.
            if shows_typing:
                await sink.send(TypingStopped(trigger.channel, trigger.chat_id))
            if working:
                await sink.send(_reaction(trigger, working, removed=True))
            raise
        self._turns_ok.inc()
        self._turn_latency.observe(time.perf_counter() - started)
        # The working reaction goes first: where a bot has one reaction (Telegram), the agent's
        # replaces it, and taking the working one back after would take the agent's too.
        if working:
            await sink.send(_reaction(trigger, working, removed=True))
        if reply.reaction and reactable:
            await sink.send(_reaction(trigger, reply.reaction))
        messages = [user_message, Message.assistant(reply.content)]
        return Answer(reply.content, key, messages, usage=reply.usage, buttons=reply.buttons)


def _reaction(trigger: InboundMessage, emoji: str, *, removed: bool = False) -> ReactionChanged:
    shown = trigger.shown_id()
    assert shown is not None
    return ReactionChanged(trigger.channel, trigger.chat_id, shown, emoji, removed)


def callback_of(message: InboundMessage) -> dict[str, str] | None:
    """The button tap `message` is (`bus.CALLBACK`), or None for a typed message."""
    callback = message.metadata.get(CALLBACK)
    if not isinstance(callback, dict):
        return None
    return {
        "data": str(callback.get("data", "")),
        "message_id": str(callback.get("message_id", "")),
    }


def reply_to_of(message: InboundMessage) -> dict[str, str] | None:
    """The message `message` quotes or replies to (`bus.REPLY_TO`), or None."""
    quoted = message.metadata.get(REPLY_TO)
    if not isinstance(quoted, dict) or not quoted.get("message_id"):
        return None
    return {
        "message_id": str(quoted["message_id"]),
        "text": str(quoted.get("text") or "")[:REPLY_TO_TEXT_MAX],
        "from": "bot" if quoted.get("from") == "bot" else "user",
    }


async def _show_nothing(text: str) -> None:
    """The snapshot sink of a turn whose channel cannot show a growing reply."""


class _ShownNowhere:
    """The sink of a runner built without one, for a turn that names none: such a turn (a
    cluster turn whose channel shows neither typing nor a growing reply) sends nothing."""

    async def send(self, event: OutboundEvent) -> None:
        if isinstance(event, ReactionChanged):
            return  # a reaction is shown where there is somewhere to show it, else not at all
        raise RuntimeError(f"a turn with nowhere to show itself sent {type(event).__name__}")


_SHOWN_NOWHERE = _ShownNowhere()


@dataclass(frozen=True, slots=True)
class PreparedMessage:
    content: str
    attachments: Sequence[MediaInfo] = ()
    #: Transcripts by path.
    transcripts: Mapping[str, str] = field(default_factory=dict)


async def prepare_message(
    trigger: InboundMessage, content: str, transcriber: Transcriber
) -> PreparedMessage:
    """`content` (the turn's text; `trigger`'s own text is its end) with the words of
    `trigger`'s audio, or placeholders, after `trigger`'s text."""
    if not trigger.media:
        return PreparedMessage(content)
    attachments = await describe_media(trigger)
    transcripts: dict[str, str] = {}
    spoken: list[str] = []
    for media in attachments:
        if media.kind != "audio":
            continue
        transcript = await transcriber.transcribe(media)
        if transcript.text is not None:
            transcripts[media.path] = transcript.text
            spoken.append(transcript.text)
        else:
            spoken.append(placeholder(media, transcript.reason or "unknown reason"))
    if not spoken:
        return PreparedMessage(content, attachments)
    # The trigger's text ends `content` (`collected_content`): the words go right after it.
    # A trigger without text of its own ends a collected turn as "Queued #2: ".
    follows_label = not trigger.content and content.endswith(": ")
    separator = "" if not content or follows_label else "\n"
    said = "\n".join(spoken)
    return PreparedMessage(content + separator + said, attachments, transcripts)
