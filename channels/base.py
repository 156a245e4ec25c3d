"""The `Channel` base class: one chat platform, seen from the gateway.

A channel needs three members: `name`, `start(inbound)` and `send(message)`. Everything else has
a default that keeps the meaning of octos' trait, and a mature channel overrides what its
platform can do (edits for streaming, typing, reactions, health). `docs/channels.md` is the
guide to writing one.

Who calls what, and when:

- the supervisor (`channels/lifecycle/supervisor.py`): `start` once the daemon runs, again with
  backoff after it raised anything but `FatalChannelError`; `stop` at shutdown;
- the manager, for each outbound event (`bus.envelope`) to this channel, one of:
  - its delivery (`channels/outbound/delivery.py`), for a reply (`OutboundMessage`):
    `format_outbound` on every chunk fitted to `limit` (`channels/outbound/delivery.py`, at most
    `max_reply_messages`), then `send`, each call inside the one retry layer, which reads the
    `channels.errors` types the channel raises;
  - its streaming (`channels/outbound/streaming.py`), for a `StreamSnapshot` and a streamed reply's
    final, only when `supports_edit()` is True: `send_with_id` for the first snapshot,
    `edit_message` for later ones (at most one per `edit_interval_s`), `finish_stream` for
    the final text;
  - its typing indicator (`channels/outbound/typing_indicator.py`), from `TypingStarted` until the
    reply or `TypingStopped`: `send_typing` every few seconds, then `stop_typing`;
- the manager's health report: `health_check`; `doctor`: `probe`;
- the dispatcher: `is_allowed` (from `allow`, set by the registry) before the agent sees a
  message, `answers_refusals`, `replies_to_retries`, `supports_edit` and `shows_typing`
  (whether to send a turn's snapshots and typing events at all);
- the daemon's HTTP server: `web_routes`, once, before it starts listening.

In a cluster (several ingress processes for the same profiles), `single_poller` says whether
the channel may receive in only one process at a time for its bot account. Such a channel is
started only while its process holds the account's lease (`channels/lifecycle/run_state.py`);
a standby process takes over within seconds when the holder dies. Which are, and why:

- True: Telegram long polling (Telegram answers a second concurrent `getUpdates` with 409
  Conflict, and the offset that confirms updates is shared by all pollers) and the email
  channel's IMAP polling (two readers of one mailbox race on `\\Seen`, and each keeps its own
  UID state, so a reader that was away would read everything since again).
- False: every webhook channel (Telegram webhook mode, Slack HTTP, LINE, Twilio, WhatsApp,
  WeCom, QQ and Feishu webhooks) and the HTTP API: each request reaches one process, so every
  ingress serves them behind a load balancer. Slack Socket Mode and Feishu's long connection:
  the platform hands each event to one of the app's open connections, so several processes
  share the load instead of fighting over it.
- False, by decision: Discord's gateway. Every connection of an unsharded bot receives every
  event, so two ingress processes publish each message twice under the same platform id, and
  the intake's dedup (`Nats-Msg-Id`) keeps one. That costs a second identify and the events'
  traffic, and buys what a lease cannot: no gap after a crash. The catch-up that reads missed
  messages back after a restart keeps its book in the process's own data directory, so a
  standby that took over a lease would not know which chats to read back.
- Not decided yet, False for now: Matrix `/sync`, QQ's websocket gateway and the WeCom AI bot
  websocket (whether the platform accepts a second connection, and what it delivers to it, is
  not verified here).

`send_listening`, `delete_message`, `react_to_message`, `remove_reaction` and `send_embed` are
octos' surface: the gateway does not call them today. Telegram (listening, reactions,
deletion), Discord (reactions, deletion, embeds) and Slack (deletion) implement them for
tools, and their tests call each one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from aiohttp import web

from bus import Attachment, AttachmentKind, ButtonRows, InboundSender, Message, OutboundMessage
from channels.access.allow import AllowList
from channels.buttons import ButtonLimits
from channels.health import ChannelHealth
from channels.media_files import DEFAULT_MAX_MEDIA_BYTES
from channels.media_links import MediaLinks, attachment_as_text
from channels.retry.pacing import RateLimits
from channels.split.limits import PlatformLimit


# An embed: a titled card with named fields, what `Channel.send_embed` sends.
@dataclass(frozen=True, slots=True)
class Embed:
    title: str
    description: str
    fields: tuple[EmbedField, ...] = ()
    #: The card's accent colour, 0xRRGGBB; None leaves the platform's own.
    color: int | None = None

    def markdown(self) -> str:
        """The card as plain Markdown, for a platform without embeds."""
        lines = [f"**{self.title}**", self.description]
        lines.extend(f"**{field.name}:** {field.value}" for field in self.fields)
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class EmbedField:
    name: str
    value: str
    #: Laid out beside its neighbours, where the platform puts fields in columns (discord.py's
    #: default too).
    inline: bool = True


#: Metadata key the manager sets on an outbound message whose content went through
#: `format_outbound`; a channel sends it with its markup mode. Without it, plain text.
FORMATTED = "octos.formatted"
#: How long one call of a `probe()` waits for the platform to answer.
PROBE_TIMEOUT_S = 10.0


class Channel(ABC):
    #: The platform's own limit, in its own unit; the manager splits replies to fit it.
    limit: ClassVar[PlatformLimit] = PlatformLimit(4000, "chars")
    #: The platform's published send rates (`channels/retry/pacing.py`); the manager's
    #: scheduler keeps every call within them. None here: only the platform's refusals pace
    #: this channel.
    rate_limits: ClassVar[RateLimits] = RateLimits()
    #: The shortest time between two edits of one streamed message.
    edit_interval_s: ClassVar[float] = 1.0
    #: True where the platform limits how often a message may be edited: a stream's final
    #: then waits for its slot like any edit. False where an edit is local (server-sent
    #: events, the terminal): snapshots are still paced, but the final goes out at once.
    edits_rate_limited: ClassVar[bool] = True
    #: The most messages one reply may take on this platform (QQ: five per user message),
    #: the splitter's truncation notice included; None leaves it to the splitter's own cap.
    max_reply_messages: ClassVar[int | None] = None
    #: Who may talk to the bot; the registry (`build_channel`) sets it from the config's `allow`
    #: and the pairing approvals.
    allow: AllowList = AllowList.everyone()
    #: Largest file a user sends that is downloaded; the registry sets it from the profile's
    #: `max_media_bytes`. A larger one is named in the message's text instead.
    max_media_bytes: int = DEFAULT_MAX_MEDIA_BYTES
    #: True where each message is a request waiting for its reply (the HTTP API): a retry of
    #: an answered message is sent the first reply again. Elsewhere a retry is only
    #: acknowledged, never answered twice.
    replies_to_retries: ClassVar[bool] = False
    #: True where the channel tells a refused sender itself, on the request that brought the
    #: message (the HTTP API: a 403): `inbound.send` then raises `bus.SenderRefused` with the
    #: notice, every time. Elsewhere the gateway sends the notice as a reply, at most once an
    #: hour, and `send` returns as for any message.
    answers_refusals: ClassVar[bool] = False
    #: True where `send_with_id` sends a whole message just as `send` does and returns the
    #: platform's id of it: the delivery layer then sends every reply that way and reports
    #: the ids (a cluster records them). False where it opens a streamed message instead (the
    #: HTTP API, the WeCom AI bot, the terminal): replies go through `send`, ids unknown.
    send_with_id_sends_whole: ClassVar[bool] = True
    #: How the channel shows a reply's buttons (`channels.buttons`): "attached", on
    #: the reply's last message by `attach_buttons` (and taken off by `remove_buttons` once
    #: used); "in_send", by `send` itself from `OutboundMessage.buttons` (the HTTP API); or
    #: "numbered", the default: a numbered list ends the reply's text, and a message of just
    #: the number is the tap.
    buttons_shown: ClassVar[Literal["attached", "in_send", "numbered"]] = "numbered"
    #: What one message's buttons may be here; the manager cuts them to it.
    button_limits: ClassVar[ButtonLimits] = ButtonLimits()
    #: The largest file the platform takes from a bot, whatever its kind (what
    #: `max_attachment_bytes` answers unless a channel tells the kinds apart); None: no limit
    #: the gateway knows of.
    max_upload_bytes: ClassVar[int | None] = None
    #: True where the platform takes a reply's files with its text, as one message (an email's
    #: attachments, the HTTP API's JSON answer): the manager gives `send` the whole reply, its
    #: `attachments` (those within `max_attachment_bytes`) included, and never calls
    #: `send_attachment`. Elsewhere the text goes first, then each file by `send_attachment`.
    sends_attachments_with_text: ClassVar[bool] = False
    #: The process's signed links to the files it keeps; the registry sets it. A platform
    #: that fetches a file by URL (LINE, Twilio) or one without files is sent such a link.
    media_links: MediaLinks | None = None

    @property
    @abstractmethod
    def name(self) -> str:
        """The routing key: outbound messages whose `channel` equals it come here. A class
        attribute (`name = "telegram"`) is the usual way to give it."""

    @abstractmethod
    async def start(self, inbound: InboundSender) -> None:
        """Receive from the platform and publish to `inbound` until stopped or cancelled.

        `await inbound.send(message)` returns once the message is durable: acknowledge the
        platform (webhook 2xx, polling offset, Socket Mode ack, IMAP `\\Seen`) only after it
        returns, never before. Give each message the platform's own id as `message_id` (update
        id, event id, message sid): a platform retry with the same id is recognised, across
        restarts, and not answered twice. `InboundRefused` (backlog full, nothing stored) is
        answered with `channels.web.webhook.refused_response` by webhooks; pollers wait its
        `retry_after_s` and ask again.

        Raise `FatalChannelError` when trying again cannot help (a bad token); any other
        exception is taken as transient and the supervisor restarts the channel.
        """

    @abstractmethod
    async def send(self, message: OutboundMessage) -> None:
        """Deliver one reply that already fits `limit` (media: whole); only ever a reply.

        Typing and stream snapshots are separate outbound events (`bus.envelope`): the manager
        turns them into `send_typing` / `send_with_id` / `edit_message` calls, never `send`.
        """

    async def stop(self) -> None:
        """Stop receiving and release connections; safe to call twice. A `RunStateChannel` has
        one that ends `start()`; override it to close clients too, after `super().stop()`."""

    @property
    def single_poller(self) -> bool:
        """True when only one process at a time may receive for this bot account (see above)."""
        return False

    def is_allowed(self, sender_id: str) -> bool:
        return self.allow.allows(sender_id)

    def is_group_chat(self, chat_id: str) -> bool:
        """Whether `rate_limits.group` applies to the chat (Telegram: a negative chat id)."""
        return False

    async def send_typing(self, chat_id: str) -> None:
        """Show "typing"; the manager calls it again every few seconds while a turn runs."""

    def shows_typing(self) -> bool:
        """Whether `send_typing` does anything: the gateway sends no typing signals otherwise."""
        return type(self).send_typing is not Channel.send_typing

    async def stop_typing(self, chat_id: str) -> None:
        """Stop showing "typing" where the platform lets a bot do that."""

    async def send_listening(self, chat_id: str) -> None:
        await self.send_typing(chat_id)

    def supports_edit(self) -> bool:
        """Without edits a channel gets no stream snapshots, only the final reply."""
        return False

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        """Send and return the platform's message id, for later edits."""
        await self.send(message)
        return None

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        """Replace a sent message's text (a stream snapshot)."""

    async def finish_stream(self, chat_id: str, message_id: str, content: str) -> None:
        """The final text of a streamed message; by default one more edit."""
        await self.edit_message(chat_id, message_id, content)

    def stream_ending(self, message: OutboundMessage) -> None:
        """The final message of a streamed reply, just before the stream editor finishes the
        stream with its text (`finish_stream` gets only the text): for a channel that answers
        with more than the text, as the API channel reports the turn's token usage."""

    async def delete_message(self, chat_id: str, message_id: str) -> None:
        """Delete a message the bot sent, where the platform allows it."""

    def max_attachment_bytes(self, kind: AttachmentKind) -> int | None:
        """The largest file of `kind` the platform takes from a bot; None: no limit the gateway
        knows of. The manager checks it before `send_attachment`: a larger file is not sent,
        and the chat is told so."""
        return self.max_upload_bytes

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        """Send one file of a reply, after its text; the platform's id of the message it made.

        `reply_to` is the message the reply answers (a platform with threads puts the file in
        that message's thread). `delivery_key` is the same on every resend of this file of this
        reply: a platform with an idempotency key derives it from this. By default, a platform
        without files: the file's link as text (a signed `/media` link of the gateway's HTTP
        server, else where the agent got it from, else its name).
        """
        text = attachment_as_text(attachment, self.media_links)
        message = OutboundMessage(
            channel=self.name,
            chat_id=chat_id,
            content=text,
            reply_to=reply_to,
            delivery_id=delivery_key,
        )
        if self.send_with_id_sends_whole:
            return await self.send_with_id(message)
        await self.send(message)
        return None

    def format_outbound(self, content: str) -> str:
        """Render one chunk of the agent's Markdown into the platform's markup: the text is
        split raw and each chunk rendered after (`channels/outbound/delivery.py`)."""
        return content

    async def attach_buttons(self, chat_id: str, message_id: str, buttons: ButtonRows) -> None:
        """Put `buttons` under the bot's message `message_id` (already fitted to the platform's
        limits); only where `buttons_shown` is "attached"."""
        raise NotImplementedError(f"{self.name} does not attach buttons")

    async def remove_buttons(self, chat_id: str, message_id: str) -> None:
        """Take the buttons off the bot's message `message_id` (a single-use button was
        tapped), where the platform can edit."""

    async def react_to_message(self, chat_id: str, message_id: str, emoji: str) -> None:
        """Add a reaction, where the platform has them."""

    async def remove_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        """Take a reaction back."""

    async def send_embed(self, chat_id: str, embed: Embed) -> str | None:
        """A titled card; by default plain Markdown sent as one message."""
        return await self.send_with_id(
            OutboundMessage(channel=self.name, chat_id=chat_id, content=embed.markdown())
        )

    def web_routes(self) -> Sequence[web.AbstractRouteDef]:
        """Routes the daemon's HTTP server mounts for this channel (webhooks); none by default.

        A webhook verifies the platform's signature (in constant time, refusing a non-ASCII
        header with 401/403, never a 500), and its signing secret is never optional: a config
        without it is a `check` error naming the key. The server has read the whole body (within
        its size and time limits) before the handler runs. Run the attack corpus
        (`tests/support/attack_corpus.py`) over every route a channel adds.
        """
        return ()

    async def health_check(self) -> ChannelHealth:
        return ChannelHealth.unknown()

    async def probe(self) -> str | None:
        """Check the credentials against the platform without receiving anything (`doctor`).

        Return who the bot is there (e.g. "@my_bot (id 123)"); raise `AuthError` when the
        platform rejects the credentials and another `ChannelError` when it cannot be reached.
        The default, None, means the channel has nothing to probe. Must finish within seconds
        (`PROBE_TIMEOUT_S` a call).
        """
        return None


# What a channel may read of its profile's sessions (the HTTP API lists them); the gateway
# provides it.
class HistoryUnavailable(Exception):
    """A session exists but cannot be read (a newer schema_version, a key collision); the
    message says which file and why. The API answers it as 409 with that reason."""


class ChatHistory(Protocol):
    async def sessions(self, channel: str) -> list[dict[str, object]]:
        """This profile's sessions on `channel`: key, chat id, topic, counts, updated_at."""
        ...

    async def messages(self, channel: str, chat_id: str) -> list[Message]:
        """The active session's messages of one chat, oldest first; `HistoryUnavailable` when
        its file cannot be read."""
        ...
