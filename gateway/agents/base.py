"""The contract between the dispatcher and whatever produces a reply: echo, an LLM, a webhook.

A turn goes in, a reply comes out; on the way the agent reports the reply as it grows through
`on_snapshot`, always the whole text so far (never a delta), so a lost or merged snapshot does
no harm downstream. The last snapshot an agent emits equals `AgentReply.content`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Self

from bus import ButtonRows, Message, SessionKey, TokenUsage
from channels.media_info import Chat, MediaInfo, Sender

#: Receives the whole reply so far, never a delta.
SnapshotSink = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class AgentTurn:
    """One user message to answer, with the conversation it belongs to."""

    profile: str
    session_key: SessionKey
    #: Earlier messages of the session, oldest first, already windowed by the caller.
    history: Sequence[Message]
    message: Message
    #: The message's files (`message.media`) described; those that could not be read are left
    #: out.
    attachments: Sequence[MediaInfo] = ()
    #: Transcripts of its audio, by path (already in `message.content`).
    transcripts: Mapping[str, str] = field(default_factory=dict)
    #: Who sent it and where (None outside a channel, as in tests).
    sender: Sender | None = None
    chat: Chat | None = None
    #: The message is a button tap: the button's `data` and the bot message that held it
    #: (`bus.CALLBACK`); None for a typed message.
    callback: Mapping[str, str] | None = None
    #: The message quotes or replies to another: its `message_id`, the start of its `text`
    #: (empty where the platform does not tell it) and whom it is `from` ("bot" or "user")
    #: (`bus.REPLY_TO`); None otherwise.
    reply_to: Mapping[str, str] | None = None
    #: The message is a user's reaction to a bot message: its `emoji` and the bot message's
    #: `message_id` (`bus.REACTION`); None otherwise.
    reaction: Mapping[str, str] | None = None


def quoted_line(turn: AgentTurn) -> str | None:
    """The line an agent that takes plain text puts before the message when it quotes another:
    `[replying to the bot: "..."]`; None when it quotes nothing (or nothing known)."""
    if turn.reply_to is None or not turn.reply_to.get("text"):
        return None
    whom = "the bot" if turn.reply_to.get("from") == "bot" else "a user"
    text = turn.reply_to["text"]
    shown = text if len(text) <= 200 else text[:199] + "…"
    return f'[replying to {whom}: "{shown}"]'


@dataclass(frozen=True, slots=True)
class ReplyFile:
    """A file an agent answers with, as the agent names it: where to fetch it (`url`,
    http(s)) or its bytes (`data`, base64). The turn keeps it before its outcome is recorded
    (`gateway.turn.reply.keep_reply_files`)."""

    url: str | None = None
    data: str | None = None
    mime: str | None = None
    name: str | None = None
    caption: str = ""


@dataclass(frozen=True, slots=True)
class AgentReply:
    content: str
    usage: TokenUsage = field(default_factory=TokenUsage)
    #: Rows of buttons under the reply.
    buttons: ButtonRows = field(default_factory=list)
    #: An emoji the bot reacts to the user's message with.
    reaction: str | None = None
    #: Files sent after the text, in order.
    attachments: Sequence[ReplyFile] = ()


class Agent(ABC):
    """Produces the reply to a turn.

    `run` may be called concurrently for different sessions and must be cancellable at any
    await: cancellation propagates and releases the connection it was using. Failures are
    raised as `gateway.agents.errors.AgentError`. Network clients are opened lazily (or in
    `__aenter__`) and released by `aclose`, which is idempotent; a closed agent runs no more
    turns.
    """

    #: The `type` of the agent's config, for logs and metrics.
    kind: ClassVar[str]

    @abstractmethod
    async def run(self, turn: AgentTurn, on_snapshot: SnapshotSink) -> AgentReply:
        """Answer `turn`, reporting the growing reply to `on_snapshot`."""

    async def aclose(self) -> None:
        """Release network clients; safe to call more than once."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
