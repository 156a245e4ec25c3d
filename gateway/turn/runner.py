"""One agent turn: history in, streamed snapshots out, the reply (or the failure) returned.

The runner does not store anything: the turn's log (`gateway.turn.outcome.TurnLog`) records its
outcome, durable before the reply is sent, and the session behind it.

Before the agent runs, the files of every message of the turn are made ready for it
(`prepare_messages`): described, and its voice messages put in words. A crash during a
transcription runs it again with the turn. The transcript (or, when there is none, a
placeholder saying why) becomes the message's text: the session stores what the agent read,
and every agent, the history and `/sessions` see words.

After it, the files the agent answered with are kept under the profile's directory
(`gateway.turn.reply.keep_reply_files`) before the turn's outcome is recorded: the recorded
reply names files the gateway has.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from bus import (
    Attachment,
    InboundMessage,
    Message,
    OutboundEvent,
    OutboundSink,
    SessionKey,
    StreamSnapshot,
    TokenUsage,
    TypingStarted,
    TypingStopped,
)
from channels.media_info import MediaInfo, describe_media
from channels.participants import chat_of, sender_of
from gateway import logs
from gateway.agents import Agent, AgentError, AgentTurn, SnapshotSink
from gateway.agents.transcription import Transcriber, placeholder
from gateway.services import ProfileServices
from gateway.turn.lanes import collected_content
from gateway.turn.outcome import Answer
from gateway.turn.reply import (
    failed_reply,
    failure_reason,
    keep_reply_files,
    platform_ids,
    reply_files_dir,
    reply_message,
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class TurnResult:
    user_message: Message
    reply: str
    usage: TokenUsage
    #: True when `reply` is an apology for a failed turn rather than an answer.
    failed: bool = False
    error: str | None = None
    #: The reply's files, kept under the profile's directory.
    attachments: Sequence[Attachment] = ()


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
        self._root = services.root
        self._max_media_bytes = services.config.max_media_bytes
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
            result = await self.run(
                key,
                messages,
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
        if result.failed:
            return Answer(result.reply, key, [result.user_message], failed=True, error=result.error)
        said = Message.assistant(result.reply)
        if result.attachments:
            said = said.model_copy(update={"media": [file.path for file in result.attachments]})
        messages_added = [result.user_message, said]
        return Answer(
            result.reply,
            key,
            messages_added,
            usage=result.usage,
            attachments=list(result.attachments),
        )

    async def run(
        self,
        key: SessionKey,
        messages: Sequence[InboundMessage],
        answers: list[str],
        *,
        stream_id: str,
        streams: bool,
        shows_typing: bool = True,
        outbound: OutboundSink | None = None,
    ) -> TurnResult:
        """Answer `messages` (one, or several collected) in the chat the last came from.

        `answers` are the platform ids of the messages this turn answers; snapshots of the
        growing reply are sent only when the channel can show them (`streams`), and typing
        signals only to a channel that shows typing, to `outbound` (default: the runner's).
        `stream_id` is the turn's id: the reply's files are kept under it.
        """
        trigger = messages[-1]
        content = collected_content([message.content for message in messages])
        media = [path for message in messages for path in message.media]
        sink = outbound or self._outbound or _SHOWN_NOWHERE
        started = time.perf_counter()
        if logs.debug_enabled:
            log.debug("turn.started", session=str(key), stream=stream_id)
        if shows_typing:
            await sink.send(TypingStarted(trigger.channel, trigger.chat_id))
        user_message = Message.user(content, media=media)
        try:
            prepared = await prepare_messages(messages, self._transcriber)
            user_message = Message.user(prepared.content, media=media)
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
            kept = await keep_reply_files(
                reply.attachments,
                reply_files_dir(self._root, stream_id),
                max_bytes=self._max_media_bytes,
                channel=trigger.channel,
                turn_id=stream_id,
            )
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
        return TurnResult(
            user_message, kept.with_notes(reply.content), reply.usage, attachments=kept.attachments
        )


async def _show_nothing(text: str) -> None:
    """The snapshot sink of a turn whose channel cannot show a growing reply."""


class _ShownNowhere:
    """The sink of a runner built without one, for a turn that names none: such a turn (a
    cluster turn whose channel shows neither typing nor a growing reply) sends nothing."""

    async def send(self, event: OutboundEvent) -> None:
        raise RuntimeError(f"a turn with nowhere to show itself sent {type(event).__name__}")


_SHOWN_NOWHERE = _ShownNowhere()


@dataclass(frozen=True, slots=True)
class PreparedMessage:
    content: str
    attachments: Sequence[MediaInfo] = ()
    #: Transcripts by path.
    transcripts: Mapping[str, str] = field(default_factory=dict)


async def prepare_messages(
    messages: Sequence[InboundMessage], transcriber: Transcriber
) -> PreparedMessage:
    """The turn's text (`collected_content`) with the words of each message's audio, or
    placeholders, after that message's own text; the files of every message described."""
    contents: list[str] = []
    attachments: list[MediaInfo] = []
    transcripts: dict[str, str] = {}
    for message in messages:
        described = await describe_media(message) if message.media else []
        spoken: list[str] = []
        for media in described:
            if media.kind != "audio":
                continue
            transcript = await transcriber.transcribe(media)
            if transcript.text is not None:
                transcripts[media.path] = transcript.text
                spoken.append(transcript.text)
            else:
                spoken.append(placeholder(media, transcript.reason or "unknown reason"))
        contents.append("\n".join([message.content, *spoken] if message.content else spoken))
        attachments.extend(described)
    return PreparedMessage(collected_content(contents), attachments, transcripts)
