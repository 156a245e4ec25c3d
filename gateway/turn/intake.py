"""The intake: everything between a channel's `send` and the journal, as the bus's inbound log.

Channels send to the bus's publisher, which hands each message to `Intake.admit`. In order: the
channel's allow list (a stranger gets at most one "your id is ..." notice an hour
and the agent never sees them), dedup by platform id against the journal (a retry returns once
the first copy is durable; a channel whose messages are requests, the HTTP API, gets the first
reply again), the backlog bound (`InboundRefused`: nothing stored), then the message is written
to the journal and its record goes on the bus to the dispatcher at once. The channel's `send`
returns once the record is durable (the channel then acknowledges the platform).

A button tap is a message like any other (`bus.CALLBACK` names the button's data and the bot
message that held it), with two more checks before it is journaled: a tap on a message whose
buttons were tapped already (with `buttons_single_use`), or after `buttons_ttl_s`, is answered
"already answered" and reaches no agent. The used buttons are remembered in the journal's dedup
table, so a restart does not forget them. Where a channel shows buttons as a numbered list, a
message of just a number is the tap of that button of the chat's last reply (`_numbered_tap`).

A user's edit of a message (`bus.EDIT`, profile setting `edits`) is deduplicated by its own id,
then: into a command, or with `edits: ignore`, it goes no further (logged); with `replace`, the
edit of a message whose turn has not started puts its text in place (an `edit` record: the turn
runs once, on the new text); otherwise it is a message of its own marked as an edit
(`triage.edit_as_new_turn`). A delete (`bus.DELETE`) of a message whose turn has not started
drops it (a `del` record: nothing answers it); after that it changes nothing.

A user's reaction to a bot message (`bus.REACTION`) is a message like a tap, deduplicated by
the platform's event id, and goes no further unless the profile sets `inbound_reactions`.

Routing does not wait for the disk: the turn runs while its message is being synced, and all
it leaves behind waits anyway. Its outcome is a later record of the same log, durable only once
every record before it is, and its reply goes out only once its outcome is durable; if the
message's write fails, the log takes no more records, so that outcome fails too and nothing is
answered for a message that was never stored (the platform, refused, sends it again).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import structlog

from bus import (
    CALLBACK,
    DELETE,
    EDIT,
    REACTION,
    TAPPED_SENT_AT,
    Admitted,
    ButtonsUsed,
    InboundMessage,
    InboundRefused,
    OutboundSink,
)
from channels.base import Channel
from channels.buttons import BUTTON_ALREADY_USED, BUTTON_EXPIRED, tap_expired, tapped_message
from channels.metrics import LoopCount
from gateway import logs
from gateway.services import ProfileServices
from gateway.turn.journal import Journal, Received
from gateway.turn.journal.state import platform_key
from gateway.turn.strangers import EdgeCheck, StrangerNotices, notice_for, scrubbed
from gateway.turn.triage import edit_as_new_turn, edit_runs, triage
from sessions.wal import LogWriteError

log = structlog.get_logger(__name__)

ALREADY_ANSWERED = "This message was answered already; its reply is in the chat's history."


@dataclass(frozen=True, slots=True)
class IntakeSettings:
    profile: str
    max_backlog_per_chat: int = 256
    max_backlog: int = 10_000
    #: What a refusal asks the platform to wait before it tries again.
    retry_after_s: float = 5.0


class Intake:
    """The profile bus's `InboundLog`: admits a message into the journal."""

    def __init__(
        self,
        settings: IntakeSettings,
        services: ProfileServices,
        journal: Journal,
        channel_named: Callable[[str], Channel | None],
        *,
        outbound: OutboundSink,
        after_durable: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._journal = journal
        self._outbound = outbound
        self._metrics = services.metrics
        self._after_durable = after_durable
        self._buttons_ttl_s = services.config.buttons_ttl_s
        self._buttons_single_use = services.config.buttons_single_use
        self._edits = services.config.edits
        self._inbound_reactions = services.config.inbound_reactions
        self._wall_clock = time.time
        self.strangers = StrangerNotices(outbound.send)
        self._edge = EdgeCheck(channel_named, self.strangers, self._count)
        self._open = asyncio.Event()
        #: journal id -> the write that makes it durable, while it is in flight
        self._in_flight: dict[int, asyncio.Future[None]] = {}
        self._counters: dict[tuple[str, str], LoopCount] = {}

    def open(self) -> None:
        """Take messages (the previous run's unfinished work has been routed)."""
        self._open.set()

    def close(self) -> None:
        """Take no more: senders get `PipeClosed`."""
        self._edge.closed = True

    def _count(self, message: InboundMessage, outcome: str) -> None:
        counter = self._counters.get((message.channel, outcome))
        if counter is None:
            counter = self._metrics.messages_in.labels(
                self._settings.profile, message.channel, outcome
            )
            self._counters[(message.channel, outcome)] = counter
        counter.inc()

    async def admit(self, message: InboundMessage) -> Admitted[Received] | None:
        """Checked, then written: the record for the dispatcher, and its durability."""
        channel = await self._edge.admit(message)
        if channel is None:
            return None
        if not self._open.is_set():
            await self._open.wait()  # recovery of the previous run comes first
        message = scrubbed(message)
        # A plain message has none of the keys an edit, a delete, a tap or a reaction sets:
        # each is looked for before its reader is asked.
        metadata = message.metadata
        if REACTION in metadata and not self._inbound_reactions:
            self._count(message, "reaction_ignored")
            log.info("intake.reaction_ignored", channel=message.channel, reason="inbound_reactions")
            return None
        known = self._journal.seen(message)
        if known is not None:
            self._count(message, "duplicate")
            await self._duplicate(channel, message, known)
            return None
        if DELETE in metadata and message.deleted_id() is not None:
            await self._delete(message)
            return None
        if EDIT in metadata and message.edited_id() is not None:
            edit = await self._edit(message)
            if edit is None:
                return None
            message = edit
        # No await from the check of a tap to its record: two taps racing on one button are
        # told apart here.
        if (
            channel.buttons_shown == "numbered"
            and (message.channel, message.chat_id) in self._journal.state.offers
        ):
            message = self._numbered_tap(message)
        tapped = tapped_message(message) if CALLBACK in message.metadata else None
        if tapped is not None:
            refusal = self._refused_tap(message, tapped)
            if refusal is not None:
                self._count(message, "tap_refused")
                await self._send(message, refusal)
                return None
        self._check_backlog(message)
        # The sender waits on a future of its own, so a channel that gives up waiting cancels
        # only that, never the write (which other messages of its batch share).
        acknowledged = asyncio.get_running_loop().create_future()
        received, durable = self._journal.accept(
            message, partial(self._durable, acknowledged=acknowledged)
        )
        self._in_flight[received.id] = durable
        if tapped is not None and self._buttons_single_use and channel.buttons_shown == "attached":
            await self._outbound.send(ButtonsUsed(message.channel, message.chat_id, tapped))
        return Admitted(received, acknowledged)

    async def _edit(self, edit: InboundMessage) -> InboundMessage | None:
        """What the edit `edit` becomes: None when it goes no further (ignored, or put in place
        of its waiting message), else the message of its own to journal."""
        edited_id = edit.edited_id()
        if self._edits == "ignore" or not edit_runs(edit):
            self._count(edit, "edit_ignored")
            log.info(
                "intake.edit_ignored",
                channel=edit.channel,
                message_id=edited_id,
                reason="edits: ignore" if self._edits == "ignore" else "the new text is a command",
            )
            return None
        state = self._journal.state
        assert edited_id is not None
        original = state.seen(platform_key(edit.channel, edit.chat_id, edited_id))
        waiting = None if original is None else state.waiting(original)
        if (
            self._edits == "replace"
            and waiting is not None
            and triage(waiting.message.content).kind == "text"
        ):
            # No await from the check to the record: the turn cannot start in between.
            self._count(edit, "edit_replaced")
            log.info("intake.edit_replaced", channel=edit.channel, message_id=edited_id)
            await self._settled(self._journal.record_edit(waiting, edit))
            return None
        self._count(edit, "edit_new_turn")
        earlier = None if original is None else state.earlier_text(original)
        previous = edit.metadata[EDIT].get("previous")
        return edit_as_new_turn(edit, earlier or (str(previous) if previous else None))

    async def _delete(self, delete: InboundMessage) -> None:
        """A delete drops its message while its turn has not started; later it changes
        nothing."""
        deleted_id = delete.deleted_id()
        assert deleted_id is not None
        state = self._journal.state
        original = state.seen(platform_key(delete.channel, delete.chat_id, deleted_id))
        waiting = None if original is None else state.waiting(original)
        if waiting is None or triage(waiting.message.content).kind not in ("text", "command"):
            self._count(delete, "delete_too_late")
            log.info("intake.delete_too_late", channel=delete.channel, message_id=deleted_id)
            return
        self._count(delete, "deleted")
        log.info("intake.deleted", channel=delete.channel, message_id=deleted_id)
        await self._settled(self._journal.record_deleted(waiting))

    async def _settled(self, durable: asyncio.Future[None]) -> None:
        """Until a record that answers the channel's send is durable; a write that failed
        refuses the send (the platform tries again)."""
        try:
            await asyncio.shield(durable)
        except LogWriteError as error:
            raise InboundRefused(
                "global", self._settings.retry_after_s, f"the journal cannot be written: {error}"
            ) from error

    def _refused_tap(self, message: InboundMessage, tapped: str) -> str | None:
        """Why the tap `message` of the bot message `tapped` reaches no agent (its buttons were
        used, or expired), or None."""
        if tap_expired(message, self._buttons_ttl_s, self._wall_clock()):
            return BUTTON_EXPIRED
        if self._buttons_single_use and self._journal.state.tapped(
            message.channel, message.chat_id, tapped
        ):
            return BUTTON_ALREADY_USED
        return None

    def _numbered_tap(self, message: InboundMessage) -> InboundMessage:
        """A message of just a number, in a chat whose last reply has buttons shown as a
        numbered list, as the tap of that button; any other message as it is."""
        number = message.content.strip()
        if not number.isdigit() or CALLBACK in message.metadata:
            return message
        offer = self._journal.state.offers.get((message.channel, message.chat_id))
        if offer is None or self._wall_clock() - offer.at > self._buttons_ttl_s:
            return message
        tappable = [button for row in offer.buttons for button in row if button.data is not None]
        index = int(number) - 1
        if not 0 <= index < len(tappable):
            return message
        button = tappable[index]
        callback = {"data": button.data, "message_id": offer.message_id}
        metadata = {**message.metadata, CALLBACK: callback, TAPPED_SENT_AT: offer.at}
        return message.model_copy(update={"content": button.text, "metadata": metadata})

    def _durable(
        self,
        received: Received,
        error: LogWriteError | None,
        *,
        acknowledged: asyncio.Future[None],
    ) -> None:
        """What the journal tells of `received`'s record (its `on_settled`): durable, or not."""
        del self._in_flight[received.id]
        if error is not None:
            self._journal.forget(received)
            if not acknowledged.done():
                # Nothing was stored: the platform is told to try again later, as when full.
                acknowledged.set_exception(
                    InboundRefused(
                        "global",
                        self._settings.retry_after_s,
                        f"the journal cannot be written: {error}",
                    )
                )
            return
        self._count(received.message, "accepted")
        if logs.debug_enabled:
            log.debug("intake.accepted", channel=received.message.channel, journal_id=received.id)
        self._after_durable()
        if not acknowledged.done():
            acknowledged.set_result(None)

    def _check_backlog(self, message: InboundMessage) -> None:
        settings = self._settings
        state = self._journal.state
        # Counted from the journal: messages still on their way to the disk count too.
        if (
            state.pending_by_chat[(message.channel, message.chat_id)]
            >= settings.max_backlog_per_chat
        ):
            raise InboundRefused(
                "chat",
                settings.retry_after_s,
                f"chat {message.chat_id} has {settings.max_backlog_per_chat} messages waiting",
            )
        if len(self._journal.state.received) >= settings.max_backlog:
            raise InboundRefused(
                "global", settings.retry_after_s, f"{settings.max_backlog} messages are waiting"
            )

    async def _duplicate(self, channel: Channel, message: InboundMessage, known: int) -> None:
        in_flight = self._in_flight.get(known)
        if in_flight is not None:
            # The first copy is not durable yet: acknowledge this one no sooner.
            await asyncio.shield(in_flight)
        if not channel.replies_to_retries or known in self._journal.state.received:
            return  # still waiting or running: its reply reaches this request too
        reply = self._journal.state.reply_for(known)
        if reply is not None:
            await self._outbound.send(reply)
        else:
            await self._send(message, ALREADY_ANSWERED, failed=True)

    async def _send(self, message: InboundMessage, text: str, *, failed: bool = False) -> None:
        await self._outbound.send(notice_for(message, text, failed=failed))
