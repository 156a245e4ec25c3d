"""What crosses the bus: messages from platforms in, typed events to platforms out, and the
contract of the inbound sender a channel hands its messages to.

Outbound, the pipe carries `OutboundEvent`, one of:

- `OutboundMessage`, octos-core's reply type: a whole reply (an answer, a command's output, a
  refusal notice), or the final text of a streamed reply, whose `stream_id` names the stream;
- `StreamSnapshot`: the whole text so far of a streamed reply (never a delta, so a lost or
  merged snapshot does no harm); shown only on a channel that can edit messages;
- `TypingStarted` / `TypingStopped`: show "typing" in a chat while a turn runs, or no longer
  (the reply itself stops it too);
- `ReactionChanged`: the bot's reaction to a user's message added or taken back (the agent's
  `reaction`, a profile's `working_reaction` while a turn runs);
- `ButtonsUsed`: a single-use button of a message was tapped: its buttons go.

The channel manager dispatches them with one `match`. A channel never receives an event: it
gets the calls the manager makes for it (`send`, `send_with_id` / `edit_message`,
`send_typing`), so control traffic needs no magic keys in a message's metadata.

Inbound, the delivery contract's first rule is a type, `InboundSender`: `await
inbound.send(message)` returns only once the message is durable (in the profile's write-ahead
log in one process, in a JetStream stream in a cluster; in tests, on the in-memory pipe). A
channel acknowledges the platform (a webhook's 2xx, Telegram's offset, Slack's ack, IMAP
`\\Seen`) only after that call returns, so a crash never loses what a platform was told was
handled. A message the gateway already has (same channel, chat and `message_id`: a platform's
retry) returns normally without being stored twice; acknowledge it as usual.

When the backlog is full the call raises `InboundRefused` and stores nothing: answer the
platform 429/503 with `Retry-After` (webhooks), or stop polling for `retry_after_s`.

A sender the channel's allow list refuses is answered by the gateway (a notice, at most once an
hour) and `send` returns normally, except on a channel that answers refusals itself
(`Channel.answers_refusals`, the HTTP API): there it raises `SenderRefused` with the notice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, TypeAlias

from pydantic import Field

from bus.errors import ErrorKind, GatewayError
from bus.message import WireModel, utc_now
from bus.session_key import SessionKey


class InboundMessage(WireModel):
    """A message a channel received from a platform user."""

    channel: str
    sender_id: str
    chat_id: str
    content: str
    timestamp: datetime = Field(default_factory=utc_now)
    media: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    message_id: str | None = None

    @classmethod
    def deletion(
        cls, channel: str, sender_id: str, chat_id: str, deleted_id: str, **metadata: Any
    ) -> InboundMessage:
        """A user's delete of their message `deleted_id`: no content, `DELETE` naming it (beside
        `metadata`), and an id of its own for dedup, `<deleted_id>:delete`."""
        return cls(
            channel=channel,
            sender_id=sender_id,
            chat_id=chat_id,
            content="",
            message_id=f"{deleted_id}:delete",
            metadata={DELETE: {"message_id": deleted_id}, **metadata},
        )

    def session_key(self, profile: str | None = None, topic: str | None = None) -> SessionKey:
        return SessionKey.for_chat(profile, self.channel, self.chat_id, topic)

    def edited_id(self) -> str | None:
        """The platform id of the message this one edits (`EDIT`), or None: not an edit."""
        return _named_id(self.metadata.get(EDIT))

    def deleted_id(self) -> str | None:
        """The platform id of the message this event deletes (`DELETE`), or None."""
        return _named_id(self.metadata.get(DELETE))

    def shown_id(self) -> str | None:
        """The platform message a reply or a reaction goes on: the edited message for an
        edit (its own id only dedups the edit event), else this one's."""
        if EDIT in self.metadata:
            return self.edited_id() or self.message_id
        return self.message_id


def quoted(message_id: str, text: str | None, *, from_bot: bool) -> dict[str, str]:
    """The `REPLY_TO` metadata of a message that quotes `message_id` (text cut to
    `REPLY_TO_TEXT_MAX`; empty where the platform does not tell it)."""
    return {
        "message_id": message_id,
        "text": (text or "")[:REPLY_TO_TEXT_MAX],
        "from": "bot" if from_bot else "user",
    }


def reaction_note(emoji: str, text: str | None) -> str:
    """The content of a user's reaction `emoji` to a bot message whose text is `text` (None or
    empty where neither the platform nor the gateway knows it)."""
    if not text:
        return f"[reaction {emoji} to a message]"
    return f"[reaction {emoji} to: {text[:REACTION_TEXT_MAX]}]"


def _named_id(value: object) -> str | None:
    if isinstance(value, dict) and value.get("message_id"):
        return str(value["message_id"])
    return None


#: Inbound metadata a channel may set on a message: the name of the profile's agent that must
#: answer it (the API's `model`; it wins over the chat's `/agent` choice and the routes), and
#: earlier messages (`[{"role", "content"}]`) that seed its session when that is still empty.
AGENT = "octos.agent"
SEED = "octos.seed"

#: Outbound metadata keys the gateway sets on a turn's replies: the platform message ids the
#: reply answers (several when queued messages were collected into one turn), the session it
#: belongs to, and whether the text is an apology for a failed turn rather than an answer.
ANSWERS = "octos.answers"
SESSION = "octos.session"
FAILED = "octos.failed"
#: On a button tap (an inbound message): `{"data": <the button's data>, "message_id": <the bot
#: message that held the button>}`; the webhook agent sees it as `message.callback`.
CALLBACK = "callback"
#: On a user's edit of their message: `{"message_id": <the platform id of the message edited>}`
#: (and `"previous"`, its earlier text, where the platform tells it). The edit's own
#: `message_id` is its dedup id (`<id>:edit:<the edit's date or event id>`), so a platform's
#: retry of one edit is one edit.
EDIT = "edit"
#: On a user's delete of their message (content empty): `{"message_id": <the platform id>}`.
DELETE = "delete"
#: On a message that quotes or replies to another: `{"message_id": ..., "text": <its first
#: 500 characters, where the platform tells them>, "from": "bot" | "user"}`; the webhook agent
#: sees it as `message.reply_to`.
REPLY_TO = "reply_to"
#: How much of a quoted message's text `REPLY_TO` carries.
REPLY_TO_TEXT_MAX = 500
#: On a user's reaction to a bot message (passed on only with the profile's
#: `inbound_reactions`): `{"emoji": "👍", "message_id": <the bot message>}`; its content is
#: `reaction_note`'s. The message's own `message_id` is the platform's event id (dedup).
REACTION = "reaction"
#: How much of the reacted-to message's text a reaction's content quotes.
REACTION_TEXT_MAX = 100
#: On a button tap, where the platform tells it: when the tapped message was sent (seconds
#: since the epoch), from which `buttons_ttl_s` counts.
TAPPED_SENT_AT = "octos.tapped_sent_at"
#: The tokens the turn used (`TokenUsage.to_dict()`), on a turn's final reply when it used any:
#: the API channel's OpenAI-compatible answers report them.
USAGE = "octos.usage"
#: Set on a dead letter sent again (`octos-gateway dead-letters retry`): when that was (seconds
#: since the epoch), from which its delivery deadline counts instead of from its turn.
SENT_AGAIN_AT = "octos.sent_again_at"


#: The most bytes a button's `data` may hold (Telegram's `callback_data` limit, the smallest).
BUTTON_DATA_MAX_BYTES = 64


class Button(WireModel):
    """A button under a reply: a tap sends `data` back as an inbound message of the chat (see
    `CALLBACK`); a button with `url` opens the link instead."""

    text: str
    data: str | None = None
    url: str | None = None


ButtonRows: TypeAlias = list[list[Button]]
AttachmentKind = Literal["image", "audio", "video", "file"]


class Attachment(WireModel):
    """A file a reply carries: an image, a voice note, a video or any other file.

    The gateway keeps the bytes itself before the turn's outcome is recorded (`path`, under the
    profile's `media/out/<turn id>/`), so the recorded reply names a file that is still there
    after a crash, and a resend sends the same bytes.
    """

    kind: AttachmentKind
    mime: str
    #: The name the file is shown under (safe as one path component).
    name: str
    size: int
    #: The hex SHA-256 of the bytes (a signed link serves the file only while it matches).
    sha256: str
    #: The local file, under the data directory.
    path: str
    #: Where the agent said it came from (an http(s) URL), if anywhere.
    url: str | None = None
    #: What the agent said of it (a Markdown image's alt text); shown where the platform puts
    #: a caption under a file.
    caption: str = ""


class OutboundMessage(WireModel):
    """A reply on its way to a platform.

    A message without `stream_id` is a whole reply. With one, it is the final text of a streamed
    reply: the snapshots before it (`bus.envelope.StreamSnapshot`) carry the same `stream_id`,
    so a channel that showed them edits that message into this final text.

    Files: `attachments` are the files of an agent's reply, described; the manager sends the
    text first, then each attachment by `Channel.send_attachment`. `media` is octos-core's wire
    field (bare local paths or URLs); the gateway sets only `attachments`, and a channel that
    still reads `media` (a tool's message) sends those as it always has.
    """

    channel: str
    chat_id: str
    content: str
    reply_to: str | None = None
    media: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    stream_id: str | None = None
    attachments: list[Attachment] = Field(default_factory=list)
    #: Stable across re-deliveries after a crash (the turn's id, then `.N` for the N-th part
    #: the splitter made): a platform with an idempotency key (Discord nonce, Matrix txnId,
    #: LINE X-Line-Retry-Key) derives it from this, so a resend is not shown twice.
    delivery_id: str | None = None
    #: Rows of buttons under the reply (its last message, when it is split); each channel
    #: shows them its own way (`channels.buttons`).
    buttons: ButtonRows = Field(default_factory=list)

    def answered_ids(self) -> list[str]:
        """The platform ids of the messages this answers: `reply_to`, then the `ANSWERS` ids
        newest first (the first part of a long reply has `reply_to`, every part has `ANSWERS`).
        Platforms that accept only replies (QQ) or answer through the inbound message's handle
        (the WeCom AI bot's `req_id`) look their handle up by these."""
        ids: list[str] = []
        if self.reply_to:
            ids.append(self.reply_to)
        answers = self.metadata.get(ANSWERS)
        if isinstance(answers, list):
            ids.extend(str(answer) for answer in reversed(answers) if answer and answer not in ids)
        return ids


@dataclass(frozen=True, slots=True)
class StreamSnapshot:
    """The reply so far: `reply.content` is the whole text, `reply.stream_id` its stream.

    The reply's other fields (`reply_to`, metadata, `delivery_id`) are those the final reply
    will carry, so the first platform message the snapshot opens answers the right message.
    """

    reply: OutboundMessage

    def __post_init__(self) -> None:
        if self.reply.stream_id is None:
            raise ValueError("a stream snapshot's reply needs the stream_id its final will carry")
        if self.reply.media or self.reply.attachments:
            raise ValueError("a stream snapshot is text only: send media with the final reply")

    @property
    def channel(self) -> str:
        return self.reply.channel

    @property
    def chat_id(self) -> str:
        return self.reply.chat_id

    @property
    def stream_id(self) -> str:
        stream_id = self.reply.stream_id
        assert stream_id is not None  # checked when the snapshot was made
        return stream_id


@dataclass(frozen=True, slots=True)
class _ChatSignal:
    """A control event for one chat: no text, only where it applies."""

    channel: str
    chat_id: str


@dataclass(frozen=True, slots=True)
class TypingStarted(_ChatSignal):
    """Show "typing" in the chat until the turn's reply (or `TypingStopped`) arrives."""


@dataclass(frozen=True, slots=True)
class TypingStopped(_ChatSignal):
    """The turn ended without a reply (cancelled): stop showing "typing"."""


@dataclass(frozen=True, slots=True)
class ReactionChanged(_ChatSignal):
    """The bot's reaction `emoji` to the message `message_id` of the chat: added, or taken
    back (`removed`); a channel without reactions ignores it."""

    message_id: str
    emoji: str
    removed: bool = False


@dataclass(frozen=True, slots=True)
class ButtonsUsed(_ChatSignal):
    """A single-use button of the bot's message `message_id` was tapped: its buttons are
    removed, or disabled, where the platform can edit."""

    message_id: str


OutboundEvent: TypeAlias = (
    OutboundMessage | StreamSnapshot | TypingStarted | TypingStopped | ReactionChanged | ButtonsUsed
)
"""The outbound pipe's item: everything the agent side sends towards a chat."""


RefusalScope = Literal["chat", "global"]


class InboundRefused(GatewayError):
    """The gateway cannot take a message now; nothing was stored, the platform should retry."""

    def __init__(self, scope: RefusalScope, retry_after_s: float, detail: str) -> None:
        super().__init__(
            ErrorKind.RATE_LIMITED,
            detail,
            suggestion=f"retry after {retry_after_s:g} s",
            status=429 if scope == "chat" else 503,
            retry_after_s=retry_after_s,
        )
        self.scope: RefusalScope = scope

    @property
    def http_status(self) -> int:
        """429 when one chat's backlog is full, 503 when the whole profile's is."""
        return 429 if self.scope == "chat" else 503


class SenderRefused(Exception):
    """The channel's allow list refuses the sender: nothing was stored and no reply will come;
    `notice` is what to tell them (their id, or a pairing code)."""

    def __init__(self, notice: str) -> None:
        super().__init__(notice)
        self.notice = notice


class InboundSender(Protocol):
    """What a channel's `start()` receives: where its platform's messages go."""

    async def send(self, message: InboundMessage) -> None:
        """Return once `message` is durable; raise `InboundRefused` when it cannot be taken,
        `SenderRefused` for a refused sender on a channel that answers refusals itself,
        `PipeClosed` once the gateway stops taking messages."""

    def close(self) -> None:
        """This channel sends no more; idempotent."""


class OutboundSink(Protocol):
    """Where the agent side sends replies, snapshots and typing signals: the bus
    (`AgentHandle`), or in a cluster the ingress holding the chat."""

    async def send(self, event: OutboundEvent) -> None: ...
