"""The WhatsApp Cloud API: a signed webhook in, the Graph API out.

`start()` takes the webhooks `web_routes()` gives the daemon's HTTP server until `stop()`, from
the start, while it checks the access token (fetching the phone number; a rejected token, error
190, is fatal, so the channel is Down rather than restarted forever). Each message is handed to
the gateway with its wamid as `message_id`, and Meta is answered only after that returns. Media
is downloaded (`GET /{media-id}`, then its URL with the bearer token) for allowed senders only.
Statuses (sent, delivered, read, failed) are logged, never answered. A message older than Meta's
7-day retry window is a replay: acknowledged and dropped. A user's reaction to a bot message is
handed over like a message (`bus.REACTION`, deduplicated by its wamid; the profile's
`inbound_reactions` decides at the intake whether it goes further); a reaction taken back is not.

While a turn runs, the user's last message is marked read with the typing indicator (it lasts
25 s, so it is renewed at most every 20 s). Replies are text messages of at most 4,096
characters, the agent's Markdown in WhatsApp's markup (`*bold*`, `_italic_`, ...); media goes
out by upload. No edits. A reply's buttons make its last message an interactive one: reply
buttons for at most 3, a list of at most 10 rows beyond that (links go in the text); a tap
comes back as an `interactive` message naming the bot message in its `context`. A reply
outside the 24-hour customer-service window (131047) is not retried: one log line and
`octos_send_errors_total{reason="outside_window"}`. A token rejected while sending also makes
the channel Down.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import structlog
from aiohttp import web

from bus import Attachment, ButtonRows, InboundSender, OutboundMessage
from channels.buttons import ButtonLimits
from channels.errors import ChannelError, DeliveryError, FatalChannelError
from channels.lifecycle.bounded import InboundDedup, RecentMap
from channels.lifecycle.run_state import CredentialsCheck, RunStateChannel
from channels.markup.plain import render_phone_text
from channels.media_files import MediaStore
from channels.retry.pacing import Rate, RateLimits
from channels.split.limits import PLATFORM_LIMITS, PlatformLimit
from channels.whatsapp.graph import (
    CHANNEL,
    OUTSIDE_WINDOW_REASON,
    GraphClient,
    JsonObject,
    TokenRejected,
)
from channels.whatsapp.inbound import DeliveryStatus, Notification, WhatsAppMessage
from channels.whatsapp.media import MAX_DOCUMENT_BYTES, receive, send_attachment, send_file
from channels.whatsapp.webhook import WhatsAppWebhook
from config import WhatsAppConfig

# WhatsApp Cloud API's published send rates, which the manager's scheduler keeps every call
# within.
#
# Meta, "Throughput" (https://developers.facebook.com/documentation/business-messaging/whatsapp/throughput):
# "For each registered business phone number, Cloud API supports up to 80 messages per second
# (mps) by default" (error 130429 past it) and "If you attempt to send too many messages to the
# same WhatsApp user number, you may encounter a pair rate limit error" (131056): one message
# every 6 seconds to one user, short bursts tolerated; 10 a minute, at most 10 at once, keeps to it.
RATE_LIMITS = RateLimits(account=Rate(80, 1.0), chat=Rate(10, 60.0))


log = structlog.get_logger(__name__)

TOKEN_REFUSED = "WhatsApp rejected the access token"

TOKEN_SUGGESTION = "replace access_token with a valid one"
#: Meta retries a webhook it could not deliver for up to 7 days; anything older is a replay.
MAX_MESSAGE_AGE_S = 7 * 24 * 3600.0
#: The typing indicator shows for 25 s; renewing it a little earlier keeps it steady.
TYPING_RENEW_S = 20.0
#: Message types that are not something to answer.
_NOT_MESSAGES = frozenset({"system", "unsupported", "request_welcome"})

# Interactive messages, as Meta documents them ("Interactive reply buttons messages", "Interactive
# list messages"): at most 3 reply buttons with titles of at most 20 characters, or a list of at
# most 10 rows (titles of at most 24) behind a button labelled in at most 20; a body of at most
# 1,024 characters; an `id` of at most 256 characters (a button's data is at most 64 bytes).
MAX_REPLY_BUTTONS = 3
MAX_LIST_ROWS = 10
MAX_INTERACTIVE_BODY = 1024
INTERACTIVE_LIMITS = ButtonLimits(max_rows=MAX_LIST_ROWS, max_per_row=MAX_LIST_ROWS, max_label=20)
LIST_BUTTON_LABEL = "Choose"
#: The body of a reply too long to be one: its text goes first, then the choices under this.
CHOICES_BODY = "Choose one:"


def interactive(body: str, buttons: ButtonRows) -> JsonObject | None:
    """The `interactive` object showing `buttons` (already fitted) under `body`; None when no
    button can be tapped (links only, which the text then names)."""
    tappable = [button for row in buttons for button in row if button.data is not None]
    links = [button for row in buttons for button in row if button.data is None and button.url]
    if links:
        body = body.rstrip() + "\n\n" + "\n".join(f"{b.text}: {b.url}" for b in links)
    if not tappable:
        return None
    if len(tappable) <= MAX_REPLY_BUTTONS:
        replies = [{"type": "reply", "reply": {"id": b.data, "title": b.text}} for b in tappable]
        return {"type": "button", "body": {"text": body}, "action": {"buttons": replies}}
    if len(tappable) > MAX_LIST_ROWS:
        log.warning("whatsapp.list_cut", rows=len(tappable), max_rows=MAX_LIST_ROWS)
    rows = [{"id": b.data, "title": b.text} for b in tappable[:MAX_LIST_ROWS]]
    return {
        "type": "list",
        "body": {"text": body},
        "action": {"button": LIST_BUTTON_LABEL, "sections": [{"rows": rows}]},
    }


class WhatsAppChannel(RunStateChannel):
    name = CHANNEL
    rate_limits = RATE_LIMITS
    limit: ClassVar[PlatformLimit] = PLATFORM_LIMITS["whatsapp"]
    #: An image, video or audio over its own limit goes as a document: one limit for all.
    max_upload_bytes = MAX_DOCUMENT_BYTES
    buttons_shown = "in_send"
    button_limits = INTERACTIVE_LIMITS

    def __init__(
        self,
        config: WhatsAppConfig,
        *,
        data_dir: Path,
        request_timeout_s: float = 30.0,
        max_message_age_s: float = MAX_MESSAGE_AGE_S,
    ) -> None:
        self.graph = GraphClient(
            base_url=config.api_base_url,
            access_token=config.access_token.get_secret_value(),
            phone_number_id=config.phone_number_id,
            timeout_s=request_timeout_s,
        )
        self._webhook_path = config.webhook_path
        self._max_age_s = max_message_age_s
        self._media = MediaStore(data_dir, CHANNEL)
        self._webhook = WhatsAppWebhook(
            app_secret=config.app_secret.get_secret_value(),
            verify_token=config.verify_token.get_secret_value(),
            phone_number_id=config.phone_number_id,
            take=self._take,
            accepting=lambda: self._run_state.inbound is not None,
        )
        self._recent = InboundDedup(max_entries=10_000, ttl_s=3600.0)
        #: chat -> the wamid of its latest message (what "read" and "typing" refer to).
        self._last_inbound: RecentMap[str, str] = RecentMap(10_000)
        self._typing_shown: dict[str, float] = {}
        super().__init__()

    def format_outbound(self, content: str) -> str:
        return render_phone_text(content, "whatsapp")

    # Lifecycle

    async def start(self, inbound: InboundSender) -> None:
        """Check the token, then take webhooks until `stop()`, cancellation or a dead token."""
        await self._run_state.serve(
            inbound,
            CredentialsCheck(self.probe, TOKEN_REFUSED, CHANNEL, TokenRejected, TOKEN_SUGGESTION),
            task_name="whatsapp-token-watch",
            path=self._webhook_path,
        )

    async def stop(self) -> None:
        """Stop taking webhooks and close the HTTP session; idempotent."""
        await super().stop()
        await self.graph.close()

    async def probe(self) -> str | None:
        number = await self.graph.whoami()
        name = number.get("verified_name") or "WhatsApp number"
        return (
            f"{name} ({number.get('display_phone_number', '?')}, id {self.graph.phone_number_id})"
        )

    def _token_dead(self, error: ChannelError) -> FatalChannelError:
        return self._run_state.refused(
            TOKEN_REFUSED,
            error,
            channel=CHANNEL,
            suggestion=TOKEN_SUGGESTION,
        )

    # Inbound

    def web_routes(self) -> list[web.RouteDef]:
        return [
            web.get(self._webhook_path, self._webhook.verify, allow_head=False),
            web.post(self._webhook_path, self._webhook.receive),
        ]

    async def _take(self, notification: Notification) -> None:
        if notification.foreign:
            log.debug("whatsapp.other_number_ignored", changes=notification.foreign)
        for status in notification.statuses:
            self._note_status(status)
        for message in notification.messages:
            await self._take_message(message)

    async def _take_message(self, message: WhatsAppMessage) -> None:
        inbound = self._run_state.receiver(CHANNEL)
        if (
            message.kind in _NOT_MESSAGES
            or message.removed_reaction
            or message.wamid in self._recent
        ):
            log.debug("whatsapp.not_answered", wamid=message.wamid, kind=message.kind)
            return
        age_s = time.time() - message.timestamp
        if message.timestamp and age_s > self._max_age_s:
            log.warning("whatsapp.stale_message_dropped", wamid=message.wamid, age_s=round(age_s))
            self._recent.seen(message.wamid)
            return
        sender = message.message.sender_id
        received = message.message
        # A stranger's files are not fetched: the dispatcher will refuse the message.
        if message.media is not None and self.is_allowed(sender):
            received = await receive(
                self.graph, self._media, received, message.media, self.max_media_bytes
            )
        # Before the hand-over: its turn starts as the message goes to the journal, and its
        # first typing call must find the message to mark read. A reaction is no message of
        # the conversation to mark read: the one the user last wrote stays the one.
        if message.kind != "reaction":
            self._remember_latest(sender, message.wamid)
        await inbound.send(received)
        self._recent.seen(message.wamid)

    def _remember_latest(self, chat_id: str, wamid: str) -> None:
        for stale_chat, _ in self._last_inbound.remember(chat_id, wamid):
            self._typing_shown.pop(stale_chat, None)

    def _note_status(self, status: DeliveryStatus) -> None:
        if status.status == "failed":
            log.warning(
                "whatsapp.delivery_failed",
                wamid=status.wamid,
                recipient=status.recipient,
                errors=list(status.error_codes),
            )
        else:
            log.debug("whatsapp.status", wamid=status.wamid, status=status.status)

    # Outbound

    async def _send_with_buttons(self, message: OutboundMessage) -> str | None:
        """The text and its buttons as one interactive message where the text fits its body,
        else the text first and the buttons under a short body of their own."""
        body = message.content
        if len(body) > MAX_INTERACTIVE_BODY or not body.strip():
            if body.strip():
                await self.graph.send(message.chat_id, "text", {"preview_url": False, "body": body})
            body = CHOICES_BODY
        shown = interactive(body, message.buttons)
        if shown is None:
            return await self.graph.send(
                message.chat_id, "text", {"preview_url": False, "body": body}
            )
        return await self.graph.send(message.chat_id, "interactive", shown)

    async def send_typing(self, chat_id: str) -> None:
        wamid = self._last_inbound.get(chat_id)
        shown_at = self._typing_shown.get(chat_id, 0.0)
        if wamid is None or time.monotonic() - shown_at < TYPING_RENEW_S:
            return
        self._typing_shown[chat_id] = time.monotonic()
        await self.graph.mark_read(wamid, typing=True)

    async def stop_typing(self, chat_id: str) -> None:
        # WhatsApp hides the indicator with the reply (or after 25 s); nothing to call.
        self._typing_shown.pop(chat_id, None)

    async def send(self, message: OutboundMessage) -> None:
        await self.send_with_id(message)

    async def react_to_message(self, chat_id: str, message_id: str, emoji: str) -> None:
        """A `reaction` message; the bot has one reaction per message, so a new one
        replaces it."""
        with self._send_errors_noted(chat_id):
            await self.graph.send(chat_id, "reaction", {"message_id": message_id, "emoji": emoji})

    async def remove_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        """A `reaction` message with no emoji takes the bot's reaction back."""
        with self._send_errors_noted(chat_id):
            await self.graph.send(chat_id, "reaction", {"message_id": message_id, "emoji": ""})

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        """One file of a reply as a media message (`image`, `video`, `audio` or `document`)
        by the id of its upload; the Cloud API has no idempotency key to pass."""
        with self._send_errors_noted(chat_id):
            return await send_attachment(self.graph, chat_id, attachment)

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        with self._send_errors_noted(message.chat_id):
            wamid = None
            for path in message.media:
                wamid = await send_file(self.graph, message.chat_id, path)
            if message.buttons:
                return await self._send_with_buttons(message) or wamid
            if message.content.strip():
                wamid = await self.graph.send(
                    message.chat_id, "text", {"preview_url": False, "body": message.content}
                )
            return wamid

    @contextmanager
    def _send_errors_noted(self, chat_id: str) -> Iterator[None]:
        """A dead token makes the channel Down; a closed 24-hour window is logged."""
        try:
            yield
        except TokenRejected as error:
            self._token_dead(error)
            raise
        except DeliveryError as error:
            if error.reason == OUTSIDE_WINDOW_REASON:
                log.warning(
                    "whatsapp.outside_24h_window",
                    chat_id=chat_id,
                    hint="the user last wrote over 24 hours ago; only a template can reach them",
                )
            raise
