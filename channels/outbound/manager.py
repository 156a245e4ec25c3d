"""The channel manager: one profile's channels, supervised, and every reply delivered.

`run()` supervises each channel's receiver (restarted with backoff, Down when fatal or when it
keeps failing) and routes the bus's outbound events (`bus.envelope`) to their channel with one
`match`: typing signals to the typing loops, stream snapshots to the stream editor, replies
split, formatted and sent under the one retry policy. `stop()` stops taking outbound events,
lets the ones in hand finish within `stop_grace_s`, stops every channel and ends all tasks
within a bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Any, assert_never

import structlog

from bus import (
    BusPublisher,
    ButtonsUsed,
    InboundMessage,
    InboundSender,
    OutboundEvent,
    OutboundMessage,
    ReactionChanged,
    StreamSnapshot,
    TypingStarted,
    TypingStopped,
    turn_made_at,
)
from bus.envelope import SENT_AGAIN_AT
from channels.base import Channel
from channels.buttons import fit_buttons, numbered_list, with_numbered_list
from channels.errors import DeliveryError
from channels.health import ChannelHealth
from channels.lifecycle.supervisor import (
    ChannelSupervisor,
    RestartPolicy,
    RunChannel,
    start_channel,
)
from channels.metrics import ChannelMetrics
from channels.outbound.delivery import Delivery, SentTexts, fits, on_disk
from channels.outbound.router import OutboundRouter
from channels.outbound.streaming import StreamEditor, StreamRecord
from channels.outbound.typing_indicator import TypingIndicators
from channels.retry import (
    Clock,
    Jitter,
    Reason,
    Retrier,
    RetryPolicy,
    Sleep,
    equal_jitter,
    full_jitter,
    reply_deadline,
)
from channels.retry.pacing import Pacer, RateLimits

log = structlog.get_logger(__name__)


#: Told of each reply that carries a `delivery_id` once it is delivered (error None, with the
#: platform ids of the messages it made, where the channel gives them) or given up on: the
#: journal records it, so a restart does not deliver it again. What it returns to wait for
#: (keeping a reply given up on as a dead letter) holds the chat's next reply until done.
DeliveryHook = Callable[[OutboundMessage, list[str], DeliveryError | None], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class QuotingSender:
    """A channel's sender that quotes, in a user's reaction, the text of the message reacted to
    when this process sent it (`SentTexts`)."""

    inner: InboundSender
    sent: SentTexts

    async def send(self, message: InboundMessage) -> None:
        await self.inner.send(self.sent.quoted(message))

    def close(self) -> None:
        self.inner.close()


@dataclass(frozen=True, slots=True)
class _Registration:
    channel: Channel
    edit_interval_s: float


class ChannelManager:
    def __init__(
        self,
        profile: str,
        publisher: BusPublisher[Any],
        *,
        metrics: ChannelMetrics | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        jitter: Jitter | None = None,
        retry_policy: RetryPolicy | None = None,
        restart_policy: RestartPolicy | None = None,
        typing_interval_s: float = 4.0,
        typing_timeout_s: float = 600.0,
        stream_ttl_s: float = 600.0,
        max_active_chats: int = 64,
        stop_grace_s: float = 5.0,
        health_timeout_s: float = 5.0,
        on_delivered: DeliveryHook | None = None,
        stream_record: StreamRecord | None = None,
        run_channel: RunChannel = start_channel,
        delivery_deadline_s: float = 86_400.0,
        wall_clock: Clock = time.time,
    ) -> None:
        """`clock`, `sleep` and `jitter` are injectable so tests run backoffs without waiting;
        `jitter=None` keeps the defaults (full jitter for restarts, equal jitter for retries).
        `stream_record` keeps the messages streamed replies make across a restart."""
        self.profile = profile
        self.metrics = metrics or ChannelMetrics.private(profile)
        self._publisher = publisher
        #: A channel's supervisor, made by `run()`: the restart settings are given here once.
        #: Channels publish what they receive on the bus (through its log, whatever it hands
        #: the agent side); `run_channel` runs each receiver (a cluster's ingress: under a
        #: poller lease).
        self._supervisor_of = partial(
            ChannelSupervisor,
            open_inbound=self._inbound_sender,
            metrics=self.metrics,
            policy=restart_policy or RestartPolicy(),
            clock=clock,
            sleep=sleep,
            jitter=jitter or full_jitter,
            run_channel=run_channel,
        )
        #: The outbound router of a `run()`, made there: its bounds are given here once.
        self._router_of = partial(
            OutboundRouter,
            source_depth=publisher.outbound_depth,
            finished=publisher.finished,
            max_active_chats=max_active_chats,
        )
        self._stop_grace_s = stop_grace_s
        self._health_timeout_s = health_timeout_s
        self._on_delivered = on_delivered
        self._delivery_deadline_s = delivery_deadline_s
        self._wall_clock = wall_clock
        #: One outbound scheduler per channel account, made at `register`.
        self._pacers: dict[str, Pacer] = {}
        self._clock, self._sleep = clock, sleep
        retrier = Retrier(
            retry_policy,
            sleep=sleep,
            jitter=jitter or equal_jitter,
            on_retry=self.metrics.send_retried,
            wall_clock=wall_clock,
            pacer_of=self._pacers.get,
        )
        self._delivery = Delivery(retrier, self.metrics)
        self.streams = StreamEditor(
            self._delivery, clock=clock, sleep=sleep, ttl_s=stream_ttl_s, record=stream_record
        )
        self.typing = TypingIndicators(
            interval_s=typing_interval_s,
            max_duration_s=typing_timeout_s,
            clock=clock,
            held=self._held,
        )
        self._registrations: dict[str, _Registration] = {}
        #: The button limits already warned about (once per profile and kind).
        self._buttons_warned: set[str] = set()
        self._supervisors: dict[str, ChannelSupervisor] = {}
        self._router: OutboundRouter | None = None
        self._running = False
        self._stop_requested = asyncio.Event()
        self._finished = asyncio.Event()
        self._finished.set()

    @property
    def sent_texts(self) -> SentTexts:
        return self._delivery.sent

    def _inbound_sender(self) -> InboundSender:
        return QuotingSender(self._publisher.inbound_sender(), self._delivery.sent)

    # -- registry -------------------------------------------------------------------------

    def register(
        self,
        channel: Channel,
        *,
        edit_interval_s: float | None = None,
        rate_limits: RateLimits | None = None,
    ) -> None:
        """Add a channel before `run()`; a second channel with the same name replaces the first.

        `rate_limits` (by default the platform's own, `channel.rate_limits`) pace its calls.
        """
        if self._running:
            raise RuntimeError("register channels before ChannelManager.run()")
        if channel.name in self._registrations:
            log.warning("manager.channel_replaced", channel=channel.name)
        interval_s = channel.edit_interval_s if edit_interval_s is None else edit_interval_s
        self._registrations[channel.name] = _Registration(channel, interval_s)
        limits = channel.rate_limits if rate_limits is None else rate_limits
        self._pacers.pop(channel.name, None)
        if limits.paced:
            self._pacers[channel.name] = Pacer(
                channel.name,
                limits,
                is_group=channel.is_group_chat,
                clock=self._clock,
                sleep=self._sleep,
            )
        self._supervisors.pop(channel.name, None)
        self.metrics.set_channel_up(channel.name, False)

    def channel(self, name: str) -> Channel | None:
        registration = self._registrations.get(name)
        return None if registration is None else registration.channel

    @property
    def channels(self) -> list[Channel]:
        return [registration.channel for registration in self._registrations.values()]

    def supervisor(self, name: str) -> ChannelSupervisor | None:
        return self._supervisors.get(name)

    def pacer(self, name: str) -> Pacer | None:
        """The outbound scheduler of the channel's account; None where it is not paced."""
        return self._pacers.get(name)

    def _held(self, channel: str, chat_id: str) -> bool:
        pacer = self._pacers.get(channel)
        return pacer is not None and pacer.held(chat_id)

    # -- lifecycle ------------------------------------------------------------------------

    async def run(self) -> None:
        """Supervise the channels and route outbound events until `stop()` or cancellation."""
        if self._running:
            raise RuntimeError("ChannelManager.run() is already running")
        self._running = True
        self._finished.clear()
        self._supervisors = {
            name: self._supervisor_of(registration.channel)
            for name, registration in self._registrations.items()
        }
        router = self._router = self._router_of(self._deliver_routed)
        try:
            async with asyncio.TaskGroup() as group:
                supervised = [
                    group.create_task(supervisor.run(), name=f"channel:{name}")
                    for name, supervisor in self._supervisors.items()
                ]
                routing = group.create_task(
                    router.run(self._publisher.outbound()), name="outbound-router"
                )
                typing_loops = group.create_task(self.typing.run(), name="typing-indicators")
                flusher = group.create_task(self.streams.run_flusher(), name="stream-flusher")
                log.info("manager.running", profile=self.profile, channels=list(self._supervisors))
                await self._stop_requested.wait()
                router.close_intake()
                await self._within_grace("outbound-router", [routing])
                self.typing.close()
                await self._within_grace("typing-indicators", [typing_loops])
                flusher.cancel()
                await asyncio.gather(*(s.stop() for s in self._supervisors.values()))
                await self._within_grace("channels", supervised)
        finally:
            self._running = False
            self._stop_requested.clear()
            self._finished.set()
            log.info("manager.stopped", profile=self.profile)

    async def stop(self) -> None:
        """Stop every channel and end `run()`, within a bound; safe to call more than once.

        Without a running `run()` there is nothing to stop: it returns at once.
        """
        if self._running:
            self._stop_requested.set()
        await self._finished.wait()

    async def drain(self) -> None:
        """Until every outbound event published so far is delivered (or given up on)."""
        router = self._router
        if router is not None and self._running:
            await router.wait_idle()

    async def _within_grace(self, what: str, tasks: Collection[asyncio.Task[None]]) -> None:
        if not tasks:
            return
        _done, late = await asyncio.wait(tasks, timeout=self._stop_grace_s)
        if late:
            log.warning(
                "manager.stop_grace_exceeded",
                profile=self.profile,
                what=what,
                tasks=sorted(task.get_name() for task in late),
                grace_s=self._stop_grace_s,
            )
            for task in late:
                task.cancel()
            await asyncio.wait(late)

    # -- health ---------------------------------------------------------------------------

    async def health(self) -> dict[str, ChannelHealth]:
        """Each channel's own health check, overruled by what its supervisor knows."""
        names = list(self._registrations)
        checks = await asyncio.gather(*(self._health_of(name) for name in names))
        return dict(zip(names, checks, strict=True))

    async def _health_of(self, name: str) -> ChannelHealth:
        supervisor = self._supervisors.get(name)
        if supervisor is None:
            return ChannelHealth.starting("not started")
        if (override := supervisor.health_override()) is not None:
            return override
        try:
            async with asyncio.timeout(self._health_timeout_s):
                return await supervisor.channel.health_check()
        except Exception as exc:
            log.warning("manager.health_check_failed", channel=name, error=str(exc))
            return ChannelHealth.degraded(f"health check failed: {type(exc).__name__}: {exc}")

    # -- delivery -------------------------------------------------------------------------

    async def deliver(self, event: OutboundEvent) -> list[str]:
        """Deliver one outbound event; raises `DeliveryError` (logged and counted) on failure.

        The platform ids of the messages a reply made (a streamed one: the stream's), where the
        channel gives them (`Channel.send_with_id_sends_whole`); none for typing and snapshots.
        """
        registration = self._registrations.get(event.channel)
        if registration is None:
            error = DeliveryError(
                f"no channel named {event.channel!r} in profile {self.profile!r}",
                reason=Reason.NO_CHANNEL,
                channel=event.channel,
            )
            self._delivery.record_failure(event.channel, event.chat_id, error)
            raise error
        channel = registration.channel
        # One `match`, in `deliver` itself: a coroutine layer of its own cost every reply a frame.
        try:
            match event:
                case TypingStarted(chat_id=chat_id):
                    self.typing.start(channel, chat_id)
                case TypingStopped(chat_id=chat_id):
                    self.typing.stop(channel.name, chat_id)
                case StreamSnapshot():
                    # A channel that cannot edit shows only the final reply.
                    if channel.supports_edit():
                        await self.streams.snapshot(channel, event, registration.edit_interval_s)
                case OutboundMessage():
                    # The reply itself is here: the indicator stops before it, or it would linger.
                    self.typing.stop(channel.name, event.chat_id)
                    deadline = reply_deadline.set(self._deadline_of(event))
                    try:
                        if event.buttons:
                            return await self._send_with_buttons(channel, event)
                        return await self._send_reply(channel, event)
                    finally:
                        reply_deadline.reset(deadline)
                case ReactionChanged(chat_id=chat_id, message_id=message_id, emoji=emoji):
                    change = channel.remove_reaction if event.removed else channel.react_to_message
                    await self._delivery.retrier.call(
                        partial(change, chat_id, message_id, emoji),
                        channel=channel.name,
                        chat_id=chat_id,
                        action="reaction",
                    )
                case ButtonsUsed(chat_id=chat_id, message_id=message_id):
                    await self._delivery.retrier.call(
                        partial(channel.remove_buttons, chat_id, message_id),
                        channel=channel.name,
                        chat_id=chat_id,
                        action="buttons",
                    )
                case _:
                    assert_never(event)
        except DeliveryError as exc:
            self._delivery.record_failure(event.channel, event.chat_id, exc)
            raise
        return []

    async def _send_reply(self, channel: Channel, reply: OutboundMessage) -> list[str]:
        if reply.attachments:
            return await self._send_with_files(channel, reply)
        streamed = reply.stream_id is not None and not reply.media
        if streamed and channel.supports_edit():
            channel.stream_ending(reply)
            return await self.streams.final(channel, reply)
        return await self._delivery.send_message(channel, reply)

    async def _send_with_buttons(self, channel: Channel, reply: OutboundMessage) -> list[str]:
        """A reply with buttons: the text as any reply's, the buttons as the channel shows them
        (`Channel.buttons_shown`). Buttons the platform refuses follow as a numbered list: the
        reply's text is never lost to them."""
        buttons = fit_buttons(
            reply.buttons,
            channel.button_limits,
            channel=channel.name,
            warned=self._buttons_warned,
        )
        if channel.buttons_shown == "numbered":
            content = with_numbered_list(reply.content, buttons)
            listed = reply.model_copy(update={"content": content, "buttons": buttons})
            return await self._send_reply(channel, listed)
        fitted = reply.model_copy(update={"buttons": buttons})
        if channel.buttons_shown == "in_send":
            # The buttons go with the whole reply (`send`), which also ends a stream the
            # channel showed growing: a stream's final edit carries only text.
            return await self._delivery.send_message(channel, fitted)
        platform_ids = await self._send_reply(channel, fitted)
        if channel.buttons_shown != "attached" or not buttons:
            return platform_ids
        try:
            if not platform_ids:
                raise DeliveryError(
                    "the reply's message has no id to put buttons on",
                    reason=Reason.UNKNOWN,
                    channel=channel.name,
                )
            await self._delivery.retrier.call(
                partial(channel.attach_buttons, reply.chat_id, platform_ids[-1], buttons),
                channel=channel.name,
                chat_id=reply.chat_id,
                action="buttons",
            )
        except DeliveryError as error:
            log.warning(
                "buttons.refused", channel=channel.name, chat_id=reply.chat_id, error=str(error)
            )
            listed = reply.model_copy(
                update={
                    "content": numbered_list(buttons),
                    "buttons": [],
                    "stream_id": None,
                    "reply_to": None,
                    "delivery_id": None
                    if reply.delivery_id is None
                    else f"{reply.delivery_id}.buttons",
                }
            )
            platform_ids += await self._delivery.send_message(channel, listed)
        return platform_ids

    async def _send_with_files(self, channel: Channel, reply: OutboundMessage) -> list[str]:
        """A reply with files: its text, then each file (`Delivery.send_attachments`); where
        the platform takes files with the text (`Channel.sends_attachments_with_text`), the
        reply whole, with the files its limits allow (and this process has), then a note for
        each other."""
        delivery = self._delivery
        if channel.sends_attachments_with_text:
            fitting = [f for f in reply.attachments if fits(channel, f) and await on_disk(f)]
            whole = reply.model_copy(update={"attachments": fitting})
            ids = await delivery.send_whole(channel, whole)
            left = reply.model_copy(
                update={"attachments": [file for file in reply.attachments if file not in fitting]}
            )
            return [*ids, *await delivery.send_attachments(channel, left)]
        text = reply.model_copy(update={"attachments": []})
        ids = []
        streamed = reply.stream_id is not None and channel.supports_edit()
        if streamed and (reply.content.strip() or self.streams.shown(channel, reply)):
            # The stream's messages are finished (or withdrawn) even when no text is left.
            channel.stream_ending(text)
            ids = await self.streams.final(channel, text)
        elif reply.content.strip():
            ids = await delivery.send_message(channel, text)
        return [*ids, *await delivery.send_attachments(channel, reply)]

    def _deadline_of(self, reply: OutboundMessage) -> float:
        """Until when a reply is retried: `delivery_deadline_s` after its turn made it (read
        from the turn id, so a restart keeps the deadline), or after now for a reply without;
        a dead letter sent again has the whole deadline again, from then."""
        made_at = turn_made_at(reply.delivery_id) if reply.delivery_id else None
        sent_again_at = reply.metadata.get(SENT_AGAIN_AT)
        if isinstance(sent_again_at, int | float):
            made_at = max(made_at or 0.0, float(sent_again_at))
        return (made_at or self._wall_clock()) + self._delivery_deadline_s

    async def _deliver_routed(self, event: OutboundEvent) -> None:
        error: DeliveryError | None = None
        platform_ids: list[str] = []
        try:
            platform_ids = await self.deliver(event)
        except DeliveryError as exc:
            # Already logged with its context and counted by `deliver`; the router goes on.
            error = exc
        # Only a reply is recorded as delivered: a snapshot shares its delivery id but is not it.
        hook = self._on_delivered
        if hook is not None and isinstance(event, OutboundMessage) and event.delivery_id:
            recorded = hook(event, platform_ids, error)
            if recorded is not None:
                await recorded
