"""Stream editing: a streamed reply shown growing in one message, edited in place.

The agent sends snapshots (`StreamSnapshot`: the whole reply so far) sharing a `stream_id`,
then the final reply with that `stream_id`. On a channel that can edit, the first snapshot is
sent and later ones edit that message, at most once per `edit_interval_s`. Snapshots arriving
within the interval are coalesced: only the newest is kept, and the flusher shows it once the
interval has passed (or the final replaces it). Identical edits are skipped. When the text
would pass the platform's limit, measured after formatting, the message is finished at a
natural break and the rest continues in a new message.

Where a message starts: each message shows `carry + snapshot[offset:]`. At a rollover, `carry`
becomes the raw text of the splitter's last chunk and `offset` the end of the snapshot, so the
next message continues exactly where the splitter put the break (including a code fence the
splitter reopened), without mapping chunks back onto the raw text. Snapshots are expected to
grow by appending, which is what an LLM stream does.

The final edits in place through `finish_stream`. When its text equals what is shown, no call is
made, unless the channel overrides `finish_stream` (then the platform needs to hear the end of
the stream, e.g. a finish flag, and gets exactly one call). It returns the platform ids of the
messages the stream made, where the channel gives real ones (`send_with_id_sends_whole`).
A finished stream is remembered for `ttl_s`: a snapshot of it arriving late (over a cluster's
core NATS, or from a turn run twice) is dropped instead of opening a second message.

Across a crash (`StreamRecord`): each platform message a stream makes is recorded (the profile's
journal) before the stream goes on, by part. A stream whose earlier run made messages, a turn
resumed after a crash under the same id, shows its parts in those messages, edited, and sends
new only the parts with none; at the final, the earlier messages the reply no longer needs are
deleted (edited to `WITHDRAWN_TEXT` where the platform cannot delete). An earlier message that
cannot be edited any more is replaced: the part is sent new and the old message withdrawn.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Protocol

import structlog

from bus import OutboundMessage, StreamSnapshot
from channels.base import Channel
from channels.errors import DeliveryError
from channels.outbound.delivery import Chunk, Delivery, fit_chunks
from channels.retry import Clock, Reason, Sleep
from channels.stopping import sleep_unless_set

log = structlog.get_logger(__name__)

StreamKey = tuple[str, str, str]
"""(channel, chat_id, stream_id)"""

#: What an earlier message of a reply shows once the reply no longer needs it, where the
#: platform cannot delete it.
WITHDRAWN_TEXT = "(continued in the message below)"


class StreamRecord(Protocol):
    """Where the messages a stream made are kept across a restart (the profile's journal)."""

    async def opened(self, key: StreamKey, part: int, platform_id: str) -> None:
        """`key`'s stream made `platform_id` as its message number `part`; returns once that is
        kept (a crash after it finds the message)."""

    def recorded(self, key: StreamKey) -> dict[int, str]:
        """part -> platform id of the messages `key`'s stream made in an earlier run."""


_FENCE_STARTS = ("```", "~~~")


def _continuation(tail: str, snapshot: str) -> str:
    """The raw text the next message starts with: the splitter's last chunk, minus a fence
    it closed at the very end (more code is still coming into that block)."""
    carry = tail.rstrip()
    body, _, last_line = carry.rpartition("\n")
    closed_by_splitter = (
        body
        and last_line.lstrip().startswith(_FENCE_STARTS)
        and not snapshot.rstrip().endswith(last_line)
    )
    return body.rstrip() if closed_by_splitter else carry


def needs_finish_call(channel: Channel) -> bool:
    """A channel that overrides `finish_stream` wants it called even for an unchanged text."""
    return type(channel).finish_stream is not Channel.finish_stream


def can_delete(channel: Channel) -> bool:
    return type(channel).delete_message is not Channel.delete_message


@dataclass(eq=False)
class _Stream:
    channel: Channel
    template: OutboundMessage
    edit_interval_s: float
    touched_at: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    message_id: str | None = None
    #: What the current message shows, as the platform was sent it.
    shown: str = ""
    carry: str = ""
    offset: int = 0
    last_edit_at: float | None = None
    #: The newest snapshot not yet shown, waiting for the edit interval to pass.
    pending: str | None = None
    #: The platform returned no id for a new message: only the final will be sent.
    without_id: bool = False
    sent_any: bool = False
    closed: bool = False
    #: Platform messages this stream has opened: the next one's part number.
    parts: int = 0
    #: The platform ids of the messages it made, in order (where the channel gives them).
    platform_ids: list[str] = field(default_factory=list)
    #: part -> platform id of the messages an earlier run of the stream made and this one has
    #: not shown a part in yet.
    earlier: dict[int, str] = field(default_factory=dict)

    def warn(self, event: str, error: DeliveryError) -> None:
        """Log a delivery of this stream that failed and was passed over."""
        log.warning(event, channel=self.channel.name, chat_id=self.chat_id, error=str(error))

    @property
    def key(self) -> StreamKey:
        assert self.template.stream_id is not None
        return (self.channel.name, self.template.chat_id, self.template.stream_id)

    def next_part(self) -> int:
        self.parts += 1
        return self.parts - 1

    @property
    def chat_id(self) -> str:
        return self.template.chat_id

    def display(self, snapshot: str) -> str:
        return self.carry + snapshot[self.offset :]

    def edit_due_at(self) -> float:
        return (
            float("-inf") if self.last_edit_at is None else self.last_edit_at + self.edit_interval_s
        )

    def next_reply_to(self) -> str | None:
        return None if self.sent_any else self.template.reply_to

    def made(self, platform_ids: list[str] | str | None) -> None:
        """Remember messages the stream made, if the channel's ids name platform messages."""
        if not self.channel.send_with_id_sends_whole or platform_ids is None:
            return
        if isinstance(platform_ids, str):
            self.platform_ids.append(platform_ids)
        else:
            self.platform_ids.extend(platform_ids)


@dataclass(eq=False, slots=True)
class StreamEditor:
    """The state of every stream being shown, and the edits that show them."""

    delivery: Delivery
    _: KW_ONLY
    clock: Clock = time.monotonic
    sleep: Sleep = asyncio.sleep
    ttl_s: float = 600.0
    #: Where the messages streams make are kept across a restart; None: nowhere.
    record: StreamRecord | None = None
    _streams: dict[StreamKey, _Stream] = field(default_factory=dict, init=False)
    #: Streams whose final was delivered, and when: their late snapshots are dropped.
    _finished: dict[StreamKey, float] = field(default_factory=dict, init=False)
    _pending_added: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _next_expiry_at: float = field(default=float("-inf"), init=False)

    def __len__(self) -> int:
        return len(self._streams)

    async def snapshot(
        self, channel: Channel, snapshot: StreamSnapshot, edit_interval_s: float
    ) -> None:
        """Show an intermediate snapshot, now or (coalesced) once the edit interval passed."""
        message = snapshot.reply
        self._expire_abandoned()
        key = (channel.name, snapshot.chat_id, snapshot.stream_id)
        if key in self._finished:
            log.debug("stream.late_snapshot_dropped", channel=key[0], stream_id=key[2])
            return
        stream = self._streams.get(key)
        if stream is None:
            stream = _Stream(
                channel,
                message,
                edit_interval_s,
                touched_at=self.clock(),
                earlier=self._earlier(key),
            )
            self._streams[key] = stream
        async with stream.lock:
            if stream.closed or stream.without_id:
                return
            now = self.clock()
            stream.touched_at = now
            if stream.message_id is not None and now < stream.edit_due_at():
                stream.pending = message.content
                self._pending_added.set()
                return
            stream.pending = None
            await self._show(stream, message.content)

    async def final(self, channel: Channel, message: OutboundMessage) -> list[str]:
        """Finish the stream with its final text; a stream never seen is sent as a reply.

        The platform ids of the messages the stream made (see the module's docstring).
        """
        assert message.stream_id is not None
        key = (channel.name, message.chat_id, message.stream_id)
        self._expire_abandoned()
        self._finished[key] = self.clock()
        stream = self._streams.pop(key, None)
        if stream is None:
            earlier = self._earlier(key)
            if not earlier:
                return await self.delivery.send_message(channel, message)
            # Resumed after a crash with nothing shown in this run: the reply goes into the
            # messages the earlier run made.
            stream = _Stream(channel, message, 0.0, touched_at=self.clock(), earlier=earlier)
        async with stream.lock:
            stream.closed = True
            stream.pending = None
            rest = stream.display(message.content)
            if stream.without_id or (stream.message_id is None and not stream.earlier):
                sent = await self.delivery.send_message(
                    channel,
                    message.model_copy(
                        update={"content": rest, "reply_to": stream.next_reply_to()}
                    ),
                )
                return [*stream.platform_ids, *sent]
            if rest.strip():
                chunks = fit_chunks(channel, rest)
                await self._complete(stream, chunks[0], final=True)
                for chunk in chunks[1:]:
                    await self._send_part(stream, chunk, reply_to=None)
            await self._withdraw_unused(stream)
            return stream.platform_ids

    def next_flush_delay_s(self) -> float | None:
        """Seconds until the earliest coalesced snapshot may be shown; None if there is none."""
        due = [s.edit_due_at() for s in self._streams.values() if s.pending is not None]
        if not due:
            return None
        return max(0.0, min(due) - self.clock())

    async def flush_due(self) -> None:
        """Show every coalesced snapshot whose edit interval has passed."""
        now = self.clock()
        for stream in list(self._streams.values()):
            if stream.pending is None or stream.edit_due_at() > now:
                continue
            async with stream.lock:
                # The lane may have shown a newer snapshot while this waited for the lock.
                if stream.closed or stream.pending is None or stream.edit_due_at() > self.clock():
                    continue
                snapshot, stream.pending = stream.pending, None
                try:
                    await self._show(stream, snapshot)
                except DeliveryError as exc:
                    self.delivery.record_failure(stream.channel.name, stream.chat_id, exc)
                except Exception as exc:
                    # Supervision point (per message): a channel's bug must not end the flusher.
                    log.error(
                        "stream.snapshot_failed",
                        channel=stream.channel.name,
                        chat_id=stream.chat_id,
                        error=f"{type(exc).__name__}: {exc}",
                        exc_info=exc,
                    )

    async def run_flusher(self) -> None:
        """Show coalesced snapshots when they fall due, so a pause in the stream (a long tool
        call) does not leave an old text on screen. Runs until cancelled."""
        while True:
            self._pending_added.clear()
            delay_s = self.next_flush_delay_s()
            if delay_s is None:
                await self._pending_added.wait()
            elif delay_s > 0:
                await sleep_unless_set(self._pending_added, delay_s, self.sleep)
            else:
                await self.flush_due()
            self._expire_abandoned()

    async def _show(self, stream: _Stream, snapshot: str) -> None:
        display = stream.display(snapshot)
        if not display.strip():
            return
        channel = stream.channel
        chunks = fit_chunks(channel, display, max_chunks=None)
        if len(chunks) > 1:
            await self._roll_over(stream, snapshot, chunks)
            return
        [chunk] = chunks
        if stream.message_id is None:
            await self._open(stream, chunk)
        elif chunk.formatted != stream.shown:
            await self.delivery.edit(channel, stream.chat_id, stream.message_id, chunk)
            stream.shown = chunk.formatted
            stream.last_edit_at = self.clock()

    async def _roll_over(self, stream: _Stream, snapshot: str, chunks: list[Chunk]) -> None:
        """Finish the current message at the splitter's first break; continue in a new one."""
        head, middle, tail = chunks[0], chunks[1:-1], chunks[-1]
        await self._complete(stream, head, final=False)
        for chunk in middle:
            await self._send_part(stream, chunk, reply_to=None)
        stream.message_id, stream.shown = None, ""
        stream.carry = _continuation(tail.raw, snapshot)
        stream.offset = len(snapshot.rstrip())
        await self._open(stream, Chunk.rendered(stream.channel, stream.carry))

    async def _open(self, stream: _Stream, chunk: Chunk) -> None:
        message_id = await self._send_part(
            stream, chunk, reply_to=stream.next_reply_to(), editable=True
        )
        stream.last_edit_at = self.clock()
        if message_id is None:
            stream.without_id = True
            log.info(
                "stream.no_message_id",
                channel=stream.channel.name,
                chat_id=stream.chat_id,
            )
            return
        stream.message_id, stream.shown = message_id, chunk.formatted

    async def _complete(self, stream: _Stream, chunk: Chunk, *, final: bool) -> None:
        """Give the current message its last text (or send it, if there is no message yet)."""
        channel = stream.channel
        if stream.message_id is None:
            await self._send_part(stream, chunk, reply_to=stream.next_reply_to())
            return
        if chunk.formatted == stream.shown and not needs_finish_call(channel):
            return
        # The final may come right after an edit; it waits for its slot like any edit, where
        # the platform limits edits.
        if channel.edits_rate_limited and (wait_s := stream.edit_due_at() - self.clock()) > 0:
            await self.sleep(wait_s)
        try:
            await self.delivery.finish(channel, stream.chat_id, stream.message_id, chunk)
        except DeliveryError as exc:
            if not final or exc.reason != Reason.UNKNOWN:
                raise
            # The message may be gone (deleted by the user): the final text still gets out.
            stream.warn("stream.finish_failed", exc)
            await self._send_part(stream, chunk, reply_to=None)
        stream.shown = chunk.formatted
        stream.last_edit_at = self.clock()

    async def _send_part(
        self, stream: _Stream, chunk: Chunk, *, reply_to: str | None, editable: bool = False
    ) -> str | None:
        """The stream's next message, showing `chunk`: the one an earlier run made for this
        part, edited, or else a new one (recorded). Its platform id, where the channel gives
        one. `editable`: the stream goes on editing it (else it is complete)."""
        channel, part = stream.channel, stream.next_part()
        stream.sent_any = True
        stale = stream.earlier.pop(part, None)
        if stale is not None:
            try:
                if editable:
                    await self.delivery.edit(channel, stream.chat_id, stale, chunk)
                else:
                    await self.delivery.finish(channel, stream.chat_id, stale, chunk)
            except DeliveryError as exc:
                if exc.reason != Reason.UNKNOWN:
                    raise
                # Gone, or too old to edit: the part is sent anew and the old one withdrawn.
                stream.warn("stream.earlier_message_not_edited", exc)
            else:
                stream.made(stale)
                return stale
        message_id = await self.delivery.send_chunk(
            channel, stream.template, chunk, reply_to=reply_to, part=part, editable=editable
        )
        stream.made(message_id)
        if message_id is not None and self.record is not None and channel.send_with_id_sends_whole:
            await self.record.opened(stream.key, part, message_id)
        if stale is not None:
            await self._withdraw(stream, stale)
        return message_id

    def shown(self, channel: Channel, message: OutboundMessage) -> bool:
        """Whether the stream `message` finishes showed anything, in this run or before."""
        assert message.stream_id is not None
        key = (channel.name, message.chat_id, message.stream_id)
        return key in self._streams or bool(self._earlier(key))

    def _earlier(self, key: StreamKey) -> dict[int, str]:
        return {} if self.record is None else self.record.recorded(key)

    async def _withdraw_unused(self, stream: _Stream) -> None:
        """The earlier run's messages the final reply did not need."""
        while stream.earlier:
            _part, platform_id = stream.earlier.popitem()
            await self._withdraw(stream, platform_id)

    async def _withdraw(self, stream: _Stream, platform_id: str) -> None:
        """Delete a message of the stream's earlier run, or where the platform cannot, edit it
        to `WITHDRAWN_TEXT`; a failure leaves it as it is (logged): the reply is out."""
        channel = stream.channel
        try:
            if can_delete(channel):
                await self.delivery.delete(channel, stream.chat_id, platform_id)
            else:
                marker = Chunk(WITHDRAWN_TEXT, WITHDRAWN_TEXT)
                await self.delivery.finish(channel, stream.chat_id, platform_id, marker)
        except DeliveryError as exc:
            stream.warn("stream.earlier_message_not_withdrawn", exc)

    def _expire_abandoned(self) -> None:
        """Forget streams whose final never came; checked at most ten times per TTL."""
        now = self.clock()
        if now < self._next_expiry_at:
            return
        self._next_expiry_at = now + self.ttl_s / 10
        expired = [k for k, s in self._streams.items() if now - s.touched_at > self.ttl_s]
        for key in expired:
            stream = self._streams.pop(key)
            stream.closed = True
            log.info("stream.abandoned_expired", channel=key[0], chat_id=key[1], stream_id=key[2])
        for key in [k for k, at in self._finished.items() if now - at > self.ttl_s]:
            del self._finished[key]
