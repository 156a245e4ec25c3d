"""The Slack channel: a slack-bolt `AsyncApp`, receiving over Socket Mode or HTTP events.

`start()` checks the bot token (`auth.test`; a refused token is fatal), then receives until
`stop()`: in socket mode over a `SocketConnection`, in http mode through the route
`web_routes()` gives the daemon's HTTP server, where Bolt verifies each request's signature.

Bolt hands `message` and `app_mention` events to `_take_event` (`process_before_response` is
on: the listener runs before Slack is answered, and Bolt starts no task of its own). It drops
duplicates (Slack's retries carry the same `event_id`; a mention in a channel arrives as both
events with one `ts`), saves shared files and hands the post to the gateway, returning once it
is durable: only then does Slack hear the event was received. Replies go out with
`chat.postMessage` in the thread the post belongs in (`ThreadBook`); streamed replies are
edited with `chat.update`.

Typing: Slack shows no typing indicator for bots outside assistant threads, so `send_typing`
stays the base class's no-op.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import structlog
from aiohttp import web
from pydantic import SecretStr
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_sdk.web.async_client import AsyncWebClient

from bus import (
    ANSWERS,
    CALLBACK,
    Attachment,
    ButtonRows,
    InboundRefused,
    InboundSender,
    OutboundMessage,
    PipeClosed,
)
from channels.base import FORMATTED, PROBE_TIMEOUT_S
from channels.buttons import ButtonLimits
from channels.errors import AuthError, ChannelError, FatalChannelError
from channels.health import ChannelHealth
from channels.lifecycle.bounded import InboundDedup, RecentMap
from channels.lifecycle.run_state import RunStateChannel
from channels.markup.slack import escape, render_mrkdwn
from channels.media_files import read_file
from channels.retry.pacing import Rate, RateLimits
from channels.slack.bolt_app import BotIdentity, build_app, webhook_handler
from channels.slack.errors import CHANNEL, slack_call
from channels.slack.inbound import (
    ACTION_PREFIX,
    MalformedEvent,
    parse_change,
    parse_event,
    parse_reaction,
    parse_tap,
    reaction_name,
    to_inbound,
)
from channels.slack.media import MAX_UPLOAD_BYTES, FileStore, read_uploads
from channels.slack.socket_mode import SocketConnection, proxy_for
from channels.split.limits import PLATFORM_LIMITS, PlatformLimit
from config import SlackConfig

# Where a reply goes: which thread of a conversation answers which post.
#
# In channels the bot answers in a thread (on the post, or in the thread the post is in); in DMs
# it answers plainly unless the user wrote in a thread. The gateway's replies name the post they
# answer (`reply_to`, the post's `ts`; later chunks of a long reply carry it in the `ANSWERS`
# metadata instead), so the channel remembers, for each post it published, the thread its answer
# belongs in. The book is bounded (oldest forgotten first); a post it no longer remembers is
# answered in a thread on itself (in a channel) or plainly (in a DM), which is right unless it was
# itself inside a thread. An outbound message may also name the thread outright with
# `metadata["thread_ts"]`.
#: Outbound metadata key naming the thread to post in (Slack's `thread_ts`) outright.
THREAD_TS = "thread_ts"


def is_direct_chat(chat_id: str) -> bool:
    """Slack's DM conversation ids start with D (group DMs with G are threaded like channels)."""
    return chat_id.startswith("D")


class ThreadBook:
    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._threads: RecentMap[tuple[str, str], str | None] = RecentMap(max_entries)

    def __len__(self) -> int:
        return len(self._threads)

    def remember(self, chat_id: str, ts: str, thread_ts: str | None) -> None:
        """Answers to post `ts` go to `thread_ts` (None: into the conversation itself)."""
        self._threads.remember((chat_id, ts), thread_ts)

    def thread_for(self, message: OutboundMessage) -> str | None:
        """The `thread_ts` to post `message` with, or None to post it plainly."""
        explicit = message.metadata.get(THREAD_TS)
        if isinstance(explicit, str) and explicit:
            return explicit
        anchor = message.reply_to or _first_answered(message.metadata)
        if not anchor:
            return None
        key = (message.chat_id, anchor)
        if key in self._threads:
            return self._threads[key]
        return None if is_direct_chat(message.chat_id) else anchor


def _first_answered(metadata: Mapping[str, object]) -> str | None:
    answers = metadata.get(ANSWERS)
    if isinstance(answers, Sequence) and not isinstance(answers, str) and answers:
        first = answers[0]
        return first if isinstance(first, str) else None
    return None


# Slack's published send rates, which the manager's scheduler keeps every call within.
#
# Slack API, "Rate limits" (https://api.slack.com/apis/rate-limits): "chat.postMessage generally
# allows posting one message per second per channel, while also maintaining a workspace-wide
# limit"; "Posting messages: 1 per second. Short bursts >1 allowed." The workspace-wide figure is
# not published: a 429 there holds the whole account (several channels refused together).
RATE_LIMITS = RateLimits(chat=Rate(1, 1.0))


log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SlackTimeouts:
    """How long the channel waits on Slack and on the gateway; the tests shorten them."""

    #: One Web API call (an upload gets three times as long).
    request_s: float = 30.0
    #: How often the SDK pings the Socket Mode connection, to notice one that went stale.
    ping_interval_s: float = 5.0
    #: Opening a Socket Mode connection (apps.connections.open and the websocket).
    connect_s: float = 30.0
    #: How long an event may take to become durable before Slack is told it was not taken.
    enqueue_s: float = 2.0


def _secret(value: SecretStr | None) -> str:
    return value.get_secret_value() if value is not None else ""


class SlackChannel(RunStateChannel):
    name = CHANNEL
    rate_limits = RATE_LIMITS
    limit: ClassVar[PlatformLimit] = PLATFORM_LIMITS["slack"]
    max_upload_bytes = MAX_UPLOAD_BYTES
    #: chat.update is a Tier 3 method (about 50 calls a minute); one edit a second keeps a
    #: streamed reply within it.
    edit_interval_s: ClassVar[float] = 1.0
    buttons_shown = "attached"
    # Block Kit: a button's label takes at most 75 characters, an actions block 25 elements, a
    # message 50 blocks (the text's sections take some of them).
    button_limits = ButtonLimits(max_rows=20, max_per_row=25, max_label=75)

    def __init__(
        self,
        config: SlackConfig,
        *,
        data_dir: Path,
        timeouts: SlackTimeouts = SlackTimeouts(),
    ) -> None:
        # The config is validated: socket mode has its app token, http mode its signing secret.
        self._mode = config.mode
        self._app_token = _secret(config.app_token)
        self._webhook_path = config.webhook_path
        bot_token, base_url = config.bot_token.get_secret_value(), config.base_url
        self._timeouts = timeouts
        proxy = proxy_for(base_url)
        self.web = AsyncWebClient(
            token=bot_token,
            base_url=base_url,
            timeout=max(1, round(timeouts.request_s)),
            proxy=proxy,
            # The manager's retry policy is the one retry layer (see errors.py).
            retry_handlers=[],
        )
        # Given no proxy, slack_sdk falls back to HTTPS_PROXY even where NO_PROXY says not to.
        self.web.proxy = proxy
        self.app = build_app(
            base_url=base_url,
            proxy=proxy,
            signing_secret=_secret(config.signing_secret),
            bot_token=bot_token,
            identity=lambda: self._identity,
            take_event=self._take_event,
            take_action=self._take_action,
        )
        self._files = FileStore(data_dir, bot_token, proxy=proxy)
        self._threads = ThreadBook()
        #: What the bot's messages say, by (chat, ts): a message keeps its text when buttons
        #: are put under it or taken off (`chat.update` replaces the whole message).
        self._texts: RecentMap[tuple[str, str], str] = RecentMap(10_000)
        self._dedup = InboundDedup(max_entries=10_000, ttl_s=3600.0)
        self._inbound: InboundSender | None = None
        #: Set when the gateway stops taking messages: the channel's receive loop ends.
        self._intake_closed = asyncio.Event()
        self._identity: BotIdentity | None = None
        self._connection: SocketConnection | None = None
        self._accepting = False
        super().__init__()

    @property
    def identity(self) -> BotIdentity | None:
        return self._identity

    def supports_edit(self) -> bool:
        return True

    def format_outbound(self, content: str) -> str:
        return render_mrkdwn(content)

    # Lifecycle

    async def start(self, inbound: InboundSender) -> None:
        """Receive until `stop()` or cancellation; a stopped channel stays stopped."""
        try:
            await self._run_state.run_until_stopped(self._receive(inbound), name="slack-receive")
        finally:
            self._accepting = False

    async def stop(self) -> None:
        """Stop receiving; returns once `start()` has closed its connection. Idempotent."""
        self._accepting = False
        await super().stop()

    async def health_check(self) -> ChannelHealth:
        if (ended := self._run_state.ended()) is not None:
            return ended
        # Nothing is taken before auth.test names the bot (its own messages are dropped).
        authenticating = ChannelHealth.starting("auth.test has not answered yet")
        if self._identity is None:
            return authenticating
        if self._mode == "http":
            return ChannelHealth.healthy() if self._accepting else authenticating
        connection = self._connection
        if connection is None:
            return ChannelHealth.degraded("connecting to Slack")
        if await connection.is_connected():
            return ChannelHealth.healthy()
        return ChannelHealth.degraded("reconnecting to Slack")

    async def _authenticate(self) -> BotIdentity:
        try:
            async with slack_call("auth.test", self._timeouts.request_s):
                response = await self.web.auth_test()
        except AuthError as error:
            raise self._fatal_error(error) from error
        user_id = response.get("user_id")
        if not isinstance(user_id, str) or not user_id:
            raise ChannelError("auth.test did not name the bot user", channel=CHANNEL)
        bot_id, team_id = response.get("bot_id"), response.get("team_id")
        return BotIdentity(
            user_id=user_id,
            bot_id=bot_id if isinstance(bot_id, str) else None,
            team_id=team_id if isinstance(team_id, str) else None,
        )

    async def probe(self) -> str | None:
        """auth.test with the bot token (`doctor`); AuthError when Slack refuses it."""
        async with slack_call("auth.test", min(self._timeouts.request_s, PROBE_TIMEOUT_S)):
            response = await self.web.auth_test()
            if self._mode == "socket":
                # The app-level token is checked too: Socket Mode needs both.
                await self.web.apps_connections_open(app_token=self._app_token)
        user, team = response.get("user"), response.get("team")
        return f"@{user} (id {response.get('user_id')}) in {team}"

    def _fatal_error(self, error: ChannelError) -> FatalChannelError:
        return self._run_state.refused("Slack refused the credentials", error, channel=CHANNEL)

    async def _receive(self, inbound: InboundSender) -> None:
        """Authenticate, then receive until cancelled; the pump ends early only by failing."""
        self._identity = await self._authenticate()
        self._inbound = inbound
        self._intake_closed.clear()
        pump = asyncio.create_task(self._intake_closed.wait(), name="slack-intake-open")
        # Set before connecting: Slack may send an envelope the moment the socket opens.
        self._accepting = True
        try:
            if self._mode == "socket":
                await self._receive_over_socket(pump)
            else:
                self._receiving()
                await pump
        finally:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)

    async def _receive_over_socket(self, pump: asyncio.Task[bool]) -> None:
        connection = SocketConnection(
            self.app,
            self._app_token,
            self.web,
            ping_interval_s=self._timeouts.ping_interval_s,
            connect_timeout_s=self._timeouts.connect_s,
        )
        try:
            async with connection:
                self._connection = connection
                self._receiving()
                await pump
        except AuthError as error:
            raise self._fatal_error(error) from error
        finally:
            self._connection = None

    def _receiving(self) -> None:
        self._run_state.receiving.set()
        # As the webhook channels log it (`RunState.serve`): the moment events are taken.
        log.info("slack.receiving", mode=self._mode)

    # Inbound

    async def _take_event(self, body: dict[str, Any]) -> None:
        """Bolt's listener, run before Slack is answered: the event goes to the gateway and
        returns once it is durable. Raising makes Bolt answer 500 (Socket Mode: no ack), so
        Slack re-sends an event the gateway could not take."""
        inbound = self._inbound
        if not self._accepting or inbound is None:
            raise ChannelError("the Slack channel is not receiving", channel=CHANNEL)
        await self._hand_over(body, self._forward(body, inbound))

    async def _hand_over(self, body: dict[str, Any], forwarding: Awaitable[None]) -> None:
        """Await `forwarding` (a payload on its way to the gateway) within the enqueue time;
        what the gateway could not take raises, so Slack is not told it was received."""
        try:
            async with asyncio.timeout(self._timeouts.enqueue_s):
                await forwarding
        except MalformedEvent as error:
            # Acknowledged: a retry of the same payload would be just as malformed.
            log.warning(
                "slack.malformed_event_skipped", event_id=body.get("event_id"), error=str(error)
            )
        except PipeClosed as error:
            self._intake_closed.set()
            raise ChannelError("the gateway is stopping", channel=CHANNEL) from error
        except InboundRefused as error:
            raise ChannelError(f"not taken now: {error.message}", channel=CHANNEL) from error
        except TimeoutError:
            raise ChannelError(
                f"the gateway did not take the event within {self._timeouts.enqueue_s:g} s",
                channel=CHANNEL,
            ) from None

    async def _forward(self, body: dict[str, Any], inbound: InboundSender) -> None:
        identity = self._identity
        assert identity is not None  # set before the pump starts
        change = parse_change(body, identity.user_id) or parse_reaction(body, identity.user_id)
        if change is not None:
            # The gateway dedups an edit, a delete or a reaction by its own id: no key of ours
            # needed.
            await inbound.send(change)
            return
        post = parse_event(body, identity.user_id)
        if post is None:
            return
        # Both keys are marked: a retry (same event_id) and the other event of a mention (same
        # channel and ts) are each recognised.
        # Marked only once the gateway has the event: a retry of one it could not take must
        # get through. The gateway's own dedup (by channel and ts) survives restarts.
        if any(key in self._dedup for key in post.dedup_keys):
            log.debug("slack.duplicate_event_dropped", event_id=post.event_id, ts=post.ts)
            return
        received = to_inbound(post, identity.user_id)
        # A stranger's files are not fetched: the dispatcher will refuse the message.
        if post.files and self.is_allowed(received.sender_id):
            received = await self._files.receive(received, post.files, self.max_media_bytes)
        self._threads.remember(post.channel, post.ts, post.reply_thread_ts)
        await inbound.send(received)
        for key in post.dedup_keys:
            self._dedup.seen(key)

    # HTTP mode

    def web_routes(self) -> list[web.RouteDef]:
        if self._mode != "http":
            return []
        return [web.post(self._webhook_path, webhook_handler(self.app, lambda: self._accepting))]

    # Outbound

    async def send(self, message: OutboundMessage) -> None:
        await self.send_with_id(message)

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        thread_ts = self._threads.thread_for(message)
        if message.media:
            await self._upload(message, thread_ts)
            return None
        text, mrkdwn = _outgoing_text(message)
        if not text.strip():
            return None
        async with slack_call("chat.postMessage", self._timeouts.request_s):
            response = await self.web.chat_postMessage(
                channel=message.chat_id, text=text, thread_ts=thread_ts, mrkdwn=mrkdwn
            )
        ts = response.get("ts")
        if not isinstance(ts, str):
            return None
        self._texts.remember((message.chat_id, ts), text)
        return ts

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        """One file by `files_upload_v2`, in the thread the reply's text went to."""
        anchor = OutboundMessage(channel=self.name, chat_id=chat_id, content="", reply_to=reply_to)
        data = await read_file(attachment.path, channel=CHANNEL, max_bytes=MAX_UPLOAD_BYTES)
        # Three calls (URL, upload, completion): more time than one message.
        async with slack_call("files_upload_v2", 3 * self._timeouts.request_s):
            await self.web.files_upload_v2(
                file=data,
                filename=attachment.name,
                title=attachment.caption or attachment.name,
                channel=chat_id,
                thread_ts=self._threads.thread_for(anchor),
            )
        return None

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        async with slack_call("chat.update", self._timeouts.request_s):
            await self.web.chat_update(channel=chat_id, ts=message_id, text=content)
        self._texts.remember((chat_id, message_id), content)

    # Buttons and reactions

    async def _take_action(self, body: dict[str, Any], ack: AsyncAck) -> None:
        """Bolt's listener of `block_actions` payloads: a tap on the bot's button goes to the
        gateway, and Slack hears of it (`ack`, within its 3 seconds) only once it is durable.
        Anything else (a link button, a payload no button of the bot's sent) is acknowledged
        and reaches no agent."""
        identity, inbound = self._identity, self._inbound
        if not self._accepting or inbound is None or identity is None:
            raise ChannelError("the Slack channel is not receiving", channel=CHANNEL)
        tap = parse_tap(body, identity.user_id)
        if tap is None:
            log.info("slack.tap_not_taken", trigger_id=body.get("trigger_id"))
            await ack()
            return
        message = tap.message
        callback = message.metadata[CALLBACK]
        held_ts = str(callback["message_id"])
        self._texts.remember((message.chat_id, held_ts), tap.held_text)
        assert message.message_id is not None  # set by parse_tap
        thread_ts = message.metadata.get("thread_ts")
        # The reply to a tap answers it in the thread of the message that held the button.
        self._threads.remember(
            message.chat_id, message.message_id, thread_ts if isinstance(thread_ts, str) else None
        )
        await self._hand_over(body, inbound.send(message))
        await ack()

    async def attach_buttons(self, chat_id: str, message_id: str, buttons: ButtonRows) -> None:
        """The message again, with `buttons` as Block Kit `actions` under its text."""
        text = self._texts.get((chat_id, message_id))
        if text is None:
            raise ChannelError(f"the text of message {message_id} is not known", channel=CHANNEL)
        async with slack_call("chat.update", self._timeouts.request_s):
            await self.web.chat_update(
                channel=chat_id, ts=message_id, text=text, blocks=button_blocks(text, buttons)
            )

    async def remove_buttons(self, chat_id: str, message_id: str) -> None:
        """The message again as only its text (`chat.update`): a used button cannot be tapped."""
        text = self._texts.get((chat_id, message_id))
        if text is None:
            log.warning("slack.buttons_not_removed", chat_id=chat_id, ts=message_id)
            return
        async with slack_call("chat.update", self._timeouts.request_s):
            await self.web.chat_update(
                channel=chat_id, ts=message_id, text=text, blocks=button_blocks(text, [])
            )

    async def react_to_message(self, chat_id: str, message_id: str, emoji: str) -> None:
        name = reaction_name(emoji)
        if name is None:
            log.warning("slack.reaction_unknown", emoji=emoji)
            return
        async with slack_call("reactions.add", self._timeouts.request_s):
            await self.web.reactions_add(channel=chat_id, timestamp=message_id, name=name)

    async def remove_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        name = reaction_name(emoji)
        if name is None:
            return
        async with slack_call("reactions.remove", self._timeouts.request_s):
            await self.web.reactions_remove(channel=chat_id, timestamp=message_id, name=name)

    async def delete_message(self, chat_id: str, message_id: str) -> None:
        async with slack_call("chat.delete", self._timeouts.request_s):
            await self.web.chat_delete(channel=chat_id, ts=message_id)

    async def _upload(self, message: OutboundMessage, thread_ts: str | None) -> None:
        uploads = await read_uploads(message.media)
        comment = message.content
        if comment and not message.metadata.get(FORMATTED):
            comment = render_mrkdwn(comment)
        # Three calls per file (URL, upload, completion): more time than one message.
        async with slack_call("files_upload_v2", 3 * self._timeouts.request_s):
            await self.web.files_upload_v2(
                file_uploads=uploads,
                channel=message.chat_id,
                thread_ts=thread_ts,
                initial_comment=comment or None,
            )


def _outgoing_text(message: OutboundMessage) -> tuple[str, bool]:
    """The text to post and whether Slack should read it as mrkdwn.

    The manager flags text it formatted; text formatting leaves unchanged is mrkdwn as it is.
    Anything else is the agent's raw text: sent escaped, as plain text.
    """
    content = message.content
    if message.metadata.get(FORMATTED) or render_mrkdwn(content) == content:
        return content, True
    return escape(content), False


#: A `section` block's text holds at most 3,000 characters.
_SECTION_CHARS = 3000


def button_blocks(text: str, buttons: ButtonRows) -> list[dict[str, Any]]:
    """A message's blocks: its text in sections, then each row of buttons as an `actions`
    block. A button's `action_id` is unique in the message; its `value` is the data."""
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": text[start : start + _SECTION_CHARS]},
        }
        for start in range(0, len(text), _SECTION_CHARS)
    ]
    for row_index, row in enumerate(buttons):
        elements: list[dict[str, Any]] = []
        for index, button in enumerate(row):
            element: dict[str, Any] = {
                "type": "button",
                "text": {"type": "plain_text", "text": button.text},
                "action_id": f"{ACTION_PREFIX}{row_index}-{index}",
            }
            if button.url is not None:
                element["url"] = button.url
            else:
                element["value"] = button.data
            elements.append(element)
        blocks.append({"type": "actions", "elements": elements})
    return blocks
