"""What a sender the allow list refuses is told: their id, at most once an hour per channel.

The agent never sees their message. Shared by the single-process intake and a cluster's
ingress, which both stand at the edge where the allow list applies. A channel whose messages
are requests (`Channel.answers_refusals`, the HTTP API) gets the notice for every refused
message, as `SenderRefused`, and answers the request with it.

Before refusing, the edge asks pairing to read the approvals again (`reread_approvals`): an
owner's `octos-gateway pair` may have approved the sender a moment ago, before the running
daemon's own look at the overlay.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from bus import InboundMessage, OutboundMessage, PipeClosed, SenderRefused
from bus.text import scrub_surrogates
from channels.base import Channel
from channels.lifecycle.bounded import InboundDedup
from gateway.turn.reply import platform_ids, reply_message

log = structlog.get_logger(__name__)

REFUSAL_NOTICE = (
    "Sorry, this bot does not know you yet. Your id is {sender_id}: ask its owner to add it "
    "to the allow list."
)
REFUSAL_NOTICE_INTERVAL_S = 3600.0

#: Where a notice goes: the outbound side of the bus.
SendReply = Callable[[OutboundMessage], Awaitable[None]]


class StrangerNotices:
    #: What to tell a refused sender instead of the plain notice (a pairing code); None: plain.
    stranger_notice: Callable[[InboundMessage], Awaitable[str | None]] | None = None
    #: Reads a channel's approvals again, for a sender about to be refused there; None: the
    #: allow lists are all there is.
    reread_approvals: Callable[[str], Awaitable[None]] | None = None

    def __init__(self, send: SendReply) -> None:
        self._send = send
        self._refusals = InboundDedup(max_entries=10_000, ttl_s=REFUSAL_NOTICE_INTERVAL_S)

    async def allowed(self, channel: Channel, message: InboundMessage) -> bool:
        """Whether `channel` lets the sender in, the approvals read again before a no."""
        if channel.is_allowed(message.sender_id):
            return True
        if self.reread_approvals is None:
            return False
        await self.reread_approvals(message.channel)
        return channel.is_allowed(message.sender_id)

    async def refuse(self, message: InboundMessage, *, answered_by_channel: bool) -> None:
        """Tell the sender (at most once an hour), or raise `SenderRefused` with the notice
        when the channel answers the refusal itself (every time: its request waits)."""
        first = not self._refusals.seen(f"{message.channel}:{message.sender_id}")
        if first:
            log.info("intake.stranger_refused", sender=message.sender_id)
        elif not answered_by_channel:
            return
        notice = await self.stranger_notice(message) if self.stranger_notice else None
        text = notice or REFUSAL_NOTICE.format(sender_id=message.sender_id)
        if answered_by_channel:
            raise SenderRefused(text)
        await self._send(notice_for(message, text))


class EdgeCheck:
    """What every intake checks first: a known channel, an allowed sender (a stranger is told
    their id, or `SenderRefused` raised), a gateway still taking messages. Counted by
    `count(message, outcome)`."""

    def __init__(
        self,
        channel_named: Callable[[str], Channel | None],
        strangers: StrangerNotices,
        count: Callable[[InboundMessage, str], None],
    ) -> None:
        self._channel_named = channel_named
        self.strangers = strangers
        self._count = count
        self.closed = False

    async def admit(self, message: InboundMessage) -> Channel | None:
        """The message's channel when it may go on; None when it was refused (and told)."""
        channel = self._channel_named(message.channel)
        if channel is None:
            log.warning("intake.unknown_channel", channel=message.channel)
            self._count(message, "unknown_channel")
            return None
        if not await self.strangers.allowed(channel, message):
            self._count(message, "refused")
            await self.strangers.refuse(message, answered_by_channel=channel.answers_refusals)
            return None
        if self.closed:
            raise PipeClosed("the gateway is stopping and takes no more messages")
        return channel


def notice_for(message: InboundMessage, text: str, *, failed: bool = False) -> OutboundMessage:
    """A reply that is not an answer (nothing to record): refusals, "already answered"."""
    return reply_message(message, text, answers=platform_ids([message]), failed=failed)


#: The fields of an inbound message that reach a file, a log line or the agent as text.
_SCRUBBED_FIELDS = ("content", "chat_id", "sender_id")


def scrubbed(message: InboundMessage) -> InboundMessage:
    """The message with lone surrogates (unencodable, from a platform's JSON) replaced."""
    try:
        # The common case, checked without building anything: every field encodes.
        message.content.encode()
        message.chat_id.encode()
        message.sender_id.encode()
    except UnicodeEncodeError:
        clean = {name: scrub_surrogates(getattr(message, name)) for name in _SCRUBBED_FIELDS}
        return message.model_copy(update=clean)
    return message
