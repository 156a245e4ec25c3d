"""One agent turn: history in, streamed snapshots out, the reply (or the failure) returned.

Before the agent runs, the files of every message of the turn are made ready for it
(`prepare_messages`): described, and its voice messages put in words. A crash during a
transcription runs it again with the turn. The transcript (or, when there is none, a
placeholder saying why) becomes the message's text: the session stores what the agent read,
and every agent, the history and `/sessions` see words. After it, the files the agent answered
with are kept under the profile's directory (`gateway.turn.reply.keep_reply_files`) before the
turn's outcome is recorded: the recorded reply names files the gateway has.

The agent that answers is chosen per message among the profile's agents (`AgentRoutes`: the
message's own choice, the chat's `/agent`, the routes, else `default`). The runner itself
stores nothing: the turn's log (`gateway.turn.outcome.TurnLog`) records its
outcome, durable before the reply is sent, and the session behind it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from bus import (
    AGENT,
    CALLBACK,
    REACTION,
    REPLY_TO,
    REPLY_TO_TEXT_MAX,
    SEED,
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
from channels.metrics import LoopCount
from config import DEFAULT_AGENT
from gateway import logs
from gateway.agents import Agent, AgentError, AgentTurn, SnapshotSink
from gateway.agents.transcription import Transcriber, placeholder
from gateway.metrics import GatewayMetrics
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
from gateway.turn.triage import AgentRoutes

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _AgentMetrics:
    """One agent's series: its turns by result and the tokens they used."""

    ok: LoopCount
    failed: LoopCount
    input_tokens: LoopCount
    output_tokens: LoopCount

    @classmethod
    def of(cls, metrics: GatewayMetrics, profile: str, agent: str) -> _AgentMetrics:
        return cls(
            metrics.turns.labels(profile, agent, "ok"),
            metrics.turns.labels(profile, agent, "agent_error"),
            metrics.agent_tokens.labels(profile, agent, "input"),
            metrics.agent_tokens.labels(profile, agent, "output"),
        )


class TurnRunner:
    """Runs turns for one profile; the caller serialises turns per chat."""

    def __init__(
        self,
        services: ProfileServices,
        agents: Mapping[str, Agent],
        outbound: OutboundSink | None = None,
    ) -> None:
        """`agents`: the profile's agents by name (`default` answers when no route says
        otherwise, `AgentRoutes`); `outbound`: where turns show their snapshots and typing,
        unless a turn names its own (a cluster worker's turns each name the ingress holding
        their chat)."""
        self._profile = services.profile
        self._max_history = services.config.sessions.max_history
        self._agents = dict(agents)
        self.routes = AgentRoutes(services.config)
        self._sessions = services.sessions
        self._topics = services.topics
        self._outbound = outbound
        self._transcriber = Transcriber(services.config.transcription)
        self._working_reaction = services.config.working_reaction
        self._root = services.root
        self._max_media_bytes = services.config.max_media_bytes
        profile, metrics = services.profile, services.metrics
        self._metrics = {name: _AgentMetrics.of(metrics, profile, name) for name in agents}
        self._turn_latency = metrics.turn_latency.labels(profile)

    async def agent_of(self, message: InboundMessage) -> str:
        """The name of the agent that answers `message` (`AgentRoutes.agent_for`), asking the
        chat's stored choice only when the profile lets chats choose."""
        chosen = None
        if self.routes.switchable:
            base_key = message.session_key(self._profile).base_key()
            chosen = (await self._topics.state(base_key)).agent
        return self.routes.agent_for(message, chosen)

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
        trigger = messages[-1]
        # Every warning of the turn (an image the model cannot be shown, an audio the
        # transcriber rejects) names the message it is about. Bound and reset by token, not
        # with `bound_contextvars`, which reads every bound variable of the context first.
        bound = structlog.contextvars.bind_contextvars(
            channel=trigger.channel, message_id=trigger.message_id
        )
        try:
            return await self.run(
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
            content = collected_content([message.content for message in messages])
            return Answer(
                failed_reply(error),
                key,
                [Message.user(content)],
                failed=True,
                error=failure_reason(error),
            )
        finally:
            for token in bound.values():
                token.var.reset(token)

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
    ) -> Answer:
        """Answer `messages` (one, or several collected) in the chat the last came from.

        `answers` are the platform ids of the messages this turn answers; snapshots of the
        growing reply are sent only when the channel can show them (`streams`), and typing
        signals only to a channel that shows typing, to `outbound` (default: the runner's).
        `stream_id` is the turn's id: the reply's files are kept under it.
        """
        trigger = messages[-1]
        metadata = trigger.metadata
        if len(messages) == 1:
            content, media = trigger.content, list(trigger.media)
        else:
            content = collected_content([message.content for message in messages])
            media = [path for message in messages for path in message.media]
        sink = outbound or self._outbound or _SHOWN_NOWHERE
        started = time.perf_counter()
        if self.routes.always_default and AGENT not in metadata:
            agent_name = DEFAULT_AGENT
        else:
            agent_name = await self.agent_of(trigger)
        if agent_name not in self._agents:
            # Named by a message journaled before the profile lost that agent: `default` answers.
            log.warning("turn.agent_gone", session=str(key), agent=agent_name)
            agent_name = DEFAULT_AGENT
        agent, metrics = self._agents[agent_name], self._metrics[agent_name]
        if logs.debug_enabled:
            log.debug("turn.started", session=str(key), stream=stream_id, agent=agent_name)
        if shows_typing:
            await sink.send(TypingStarted(trigger.channel, trigger.chat_id))
        working = self._working_reaction if self._working_reaction and _reactable(trigger) else None
        if working:
            await sink.send(_reaction(trigger, working))
        user_message = Message.user(content, media=media)
        try:
            described: Sequence[MediaInfo] = ()
            transcripts: Mapping[str, str] = {}
            if media:
                # Described, and voice put in words: a turn without files has nothing to do.
                prepared = await prepare_messages(messages, self._transcriber)
                user_message = Message.user(prepared.content, media=media)
                described, transcripts = prepared.attachments, prepared.transcripts
            history = await self._sessions.history(key, self._max_history)
            seeded = seed_of(trigger) if not history and SEED in metadata else []
            history = seeded or history
            turn = AgentTurn(
                profile=self._profile,
                session_key=key,
                history=history,
                message=user_message,
                attachments=described,
                transcripts=transcripts,
                sender=sender_of(trigger),
                chat=chat_of(trigger),
                callback=callback_of(trigger) if CALLBACK in metadata else None,
                reply_to=reply_to_of(trigger) if REPLY_TO in metadata else None,
                reaction=reaction_of(trigger) if REACTION in metadata else None,
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

            reply = await agent.run(turn, show_snapshot)
            # Most replies are text alone: no directory to name, nothing to keep.
            kept = (
                await keep_reply_files(
                    reply.attachments,
                    reply_files_dir(self._root, stream_id),
                    max_bytes=self._max_media_bytes,
                    channel=trigger.channel,
                    turn_id=stream_id,
                )
                if reply.attachments
                else None
            )
        except AgentError as error:
            log.error("turn.agent_failed", session=str(key), agent=agent_name, error=str(error))
            metrics.failed.inc()
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
        metrics.ok.inc()
        metrics.input_tokens.inc(reply.usage.input_tokens)
        metrics.output_tokens.inc(reply.usage.output_tokens)
        self._turn_latency.observe(time.perf_counter() - started)
        # The working reaction goes first: where a bot has one reaction (Telegram), the agent's
        # replaces it, and taking the working one back after would take the agent's too.
        if working:
            await sink.send(_reaction(trigger, working, removed=True))
        if reply.reaction and _reactable(trigger):
            await sink.send(_reaction(trigger, reply.reaction))
        if kept is None:
            text, attachments = reply.content, []
            said = Message.assistant(text)
        else:
            text, attachments = kept.with_notes(reply.content), list(kept.attachments)
            said = Message.assistant(text)
            if attachments:
                said = said.model_copy(update={"media": [file.path for file in attachments]})
        return Answer(
            text,
            key,
            [*seeded, user_message, said],
            usage=reply.usage,
            buttons=reply.buttons,
            attachments=attachments,
        )


def _reactable(trigger: InboundMessage) -> bool:
    """Whether a reaction can go on `trigger`: a tap or a reaction is an interaction, not a
    message a reaction could go on."""
    metadata = trigger.metadata
    return CALLBACK not in metadata and REACTION not in metadata and trigger.shown_id() is not None


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


def reaction_of(message: InboundMessage) -> dict[str, str] | None:
    """The user's reaction `message` is (`bus.REACTION`), or None for any other message."""
    reaction = message.metadata.get(REACTION)
    if not isinstance(reaction, dict) or not reaction.get("emoji"):
        return None
    return {"emoji": str(reaction["emoji"]), "message_id": str(reaction.get("message_id", ""))}


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


def seed_of(trigger: InboundMessage) -> list[Message]:
    """The earlier messages `trigger` brings for an empty session (`bus.SEED`: an OpenAI-style
    request's history before its last message)."""
    seed = trigger.metadata.get(SEED)
    if not isinstance(seed, list):
        return []
    makers = {"user": Message.user, "assistant": Message.assistant, "system": Message.system}
    seeded = []
    for item in seed:
        if isinstance(item, dict) and isinstance(item.get("content"), str):
            make = makers.get(str(item.get("role")))
            if make is not None:
                seeded.append(make(item["content"]))
    return seeded
