"""An ingress process's side of live events: it shows the turns of the messages it took in.

It listens on its own `{prefix}.live.{ingress}` (core NATS). Stream snapshots, typing signals,
reactions and used buttons from workers go into the profile's local outbound lane for the chat
(the channel manager's router, as in one process: in order, a snapshot with a newer one behind
it skipped).

A turn that sent live events has a reply naming this ingress (`Octos-Live-At`). Whichever
ingress takes that reply from the outbound stream hands it over here with a request on the same
subject (`hand_over`), even when that is this very process: the reply then joins the same lane,
behind the turn's snapshots and typing in the order they were published, so it finishes the
stream in the message the snapshots opened and stops the typing, exactly once. This process
answers with the outcome (the platform ids, or why it was given up); the delivering ingress
records it and acknowledges the reply, as for any other, so the chat's order is kept by the
outbound partition.

A live event marked to follow a reply of its chat still on its way (`Octos-Live-After`, from
`gateway.cluster.live`) is held, by (profile, the reply's message id), until that reply was handed
over here or this process's delivery layer delivered it (`reply_delivered`), then joins the chat's
lane, in order, right behind it. Should the reply never come here (given up, or sent whole by an
ingress that found this one gone), held events are dropped after `HOLD_S`: a live event lost costs
nothing (the turn's reply, behind it in the stream, is durable), while one shown late would open a
draft after the reply it belongs before.

The window: an ingress that is gone (stopped or killed) has no subscription, the request gets
no responders, and the delivering ingress sends the reply itself, whole, as a new message; the
draft the gone ingress was editing stays as it left it. The delivering ingress asks again every
`ASK_AGAIN_AFTER_S` while it waits (a killed ingress never answers; a new request finds it gone),
and after `HANDOVER_TIMEOUT_S` the reply is offered again. This side keeps each hand-over's
outcome by the reply's message id, so a repeat waits for (or returns) the first one instead of
sending the reply twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict
from contextlib import AsyncExitStack
from typing import Protocol, Self

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError

from bus import OutboundMessage, PipeClosed
from gateway.cluster.codec import (
    FINAL,
    LIVE_AFTER,
    LIVE_KIND,
    MSG_ID,
    CodecError,
    Delivered,
    LiveSignal,
    OutboundEnvelope,
    decode_live_signal,
)
from gateway.cluster.connection import NATS_ERRORS
from gateway.cluster.streams import ClusterNames

log = structlog.get_logger(__name__)

#: How long live events wait for the reply they are to follow.
HOLD_S = 30.0
#: Events held for one reply at most (the oldest go first: a snapshot holds the whole text).
MAX_HELD = 256

HeldKey = tuple[str, str]


class HeldSignals:
    def __init__(self) -> None:
        self._held: dict[HeldKey, list[LiveSignal]] = {}
        self._expiry: dict[HeldKey, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        return sum(map(len, self._held.values()))

    def hold(self, key: HeldKey, signal: LiveSignal) -> None:
        """Keep `signal` until the reply `key` (profile, message id) is handed over."""
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = []
            self._expiry[key] = asyncio.get_running_loop().call_later(HOLD_S, self._drop, key)
        held.append(signal)
        if len(held) > MAX_HELD:
            del held[0]

    def release(self, key: HeldKey) -> list[LiveSignal]:
        """What waited for the reply `key`, in the order it came (now to be shown)."""
        expiry = self._expiry.pop(key, None)
        if expiry is not None:
            expiry.cancel()
        return self._held.pop(key, [])

    def close(self) -> None:
        for key in list(self._held):
            self.release(key)

    def _drop(self, key: HeldKey) -> None:
        dropped = self.release(key)
        log.info("cluster.live_events_dropped", after=key[1], events=len(dropped), held_s=HOLD_S)


#: How long a delivering ingress waits for the showing one to deliver a reply handed over.
HANDOVER_TIMEOUT_S = 60.0
#: How often it asks again meanwhile: an ingress killed mid-delivery never answers, and only a
#: new request tells it is gone (no responders).
ASK_AGAIN_AFTER_S = 2.0
#: How many hand-overs' outcomes are kept for repeated requests.
REMEMBERED_OUTCOMES = 1024


class LiveChannels(Protocol):
    """One profile's channels, as the live side uses them (`gateway.cluster.ingress`)."""

    async def show(self, signal: LiveSignal) -> None:
        """Into the chat's outbound lane, behind what is there."""

    async def queue(self, message: OutboundMessage) -> asyncio.Future[Delivered]:
        """Into the chat's outbound lane now; the future is its outcome once delivered."""


class LiveShows:
    """Listens while open (`async with`); hand-overs in hand are answered before it closes."""

    def __init__(self, client: Client, names: ClusterNames, ingress_id: str) -> None:
        self._client = client
        self._subject = names.live_subject(ingress_id)
        self._profiles: dict[str, LiveChannels] = {}
        self._outcomes: OrderedDict[tuple[str, str], asyncio.Future[Delivered]] = OrderedDict()
        #: Live events waiting for a reply of their chat to be handed over first.
        self._held = HeldSignals()
        #: The replies this process's delivery layer finished lately (`reply_delivered`).
        self._delivered: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._stack = AsyncExitStack()
        self._answering: asyncio.TaskGroup | None = None

    def add_profile(self, profile: str, channels: LiveChannels) -> None:
        self._profiles[profile] = channels

    def remove_profile(self, profile: str) -> None:
        self._profiles.pop(profile, None)

    async def __aenter__(self) -> Self:
        self._answering = await self._stack.enter_async_context(asyncio.TaskGroup())
        try:
            subscription = await self._client.subscribe(self._subject, cb=self._on_message)
        except BaseException:
            await self._stack.aclose()
            raise
        self._stack.push_async_callback(_unsubscribe, subscription)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Nothing new is answered (a requester then delivers the reply itself); answers in
        # hand are waited for.
        self._answering = None
        self._held.close()
        await self._stack.aclose()

    async def _on_message(self, msg: Msg) -> None:
        headers = msg.headers or {}
        try:
            if headers.get(LIVE_KIND) == FINAL:
                await self._hand_over(msg, OutboundEnvelope.decode(headers, msg.data))
                return
            profile, signal = decode_live_signal(headers, msg.data)
        except CodecError as error:
            log.warning("cluster.live_event_unreadable", error=str(error))
            return
        after = headers.get(LIVE_AFTER)
        if after is not None and not self._came((profile, after)):
            # A reply of the chat is still on its way here: this waits behind it.
            self._held.hold((profile, after), signal)
            return
        await self._show(profile, signal)

    async def _show(self, profile: str, signal: LiveSignal) -> None:
        channels = self._profiles.get(profile)
        if channels is None:
            return  # not (or no longer) running here: the reply is delivered without it
        try:
            await channels.show(signal)
        except PipeClosed:
            log.debug("cluster.live_event_after_stop", profile=profile)

    async def _hand_over(self, msg: Msg, envelope: OutboundEnvelope) -> None:
        key = (envelope.profile, (msg.headers or {}).get(MSG_ID) or msg.reply)
        outcome = self._outcomes.get(key)
        channels = self._profiles.get(envelope.profile)
        answering = self._answering
        if outcome is None:
            try:
                if channels is None or answering is None:
                    raise PipeClosed(f"profile {envelope.profile!r} is not shown here")
                outcome = await channels.queue(envelope.message)
            except PipeClosed:
                await _respond(msg, {"not_here": True})
                return
            self._remember(key, outcome)
            for signal in self._held.release(key):
                await self._show(envelope.profile, signal)
        if answering is None:
            return  # closing: the requester times out and the reply is offered again
        answering.create_task(self._answer(msg, outcome), name=f"live-hand-over:{key[1]}")

    def _came(self, key: tuple[str, str]) -> bool:
        """Whether the reply `key` was handed over here, or delivered by this process."""
        return key in self._outcomes or key in self._delivered

    async def reply_delivered(self, profile: str, msg_id: str) -> None:
        """A reply this process's delivery layer finished (sent here whole, or handed over to
        the ingress that showed its turn, and delivered there): live events waiting for it
        are shown now."""
        key = (profile, msg_id)
        self._delivered[key] = None
        while len(self._delivered) > REMEMBERED_OUTCOMES:
            self._delivered.popitem(last=False)
        for signal in self._held.release(key):
            await self._show(profile, signal)

    def _remember(self, key: tuple[str, str], outcome: asyncio.Future[Delivered]) -> None:
        self._outcomes[key] = outcome
        while len(self._outcomes) > REMEMBERED_OUTCOMES:
            self._outcomes.popitem(last=False)

    async def _answer(self, msg: Msg, outcome: asyncio.Future[Delivered]) -> None:
        done, _ = await asyncio.wait([outcome], timeout=HANDOVER_TIMEOUT_S)
        if not done or outcome.cancelled():
            log.warning("cluster.hand_over_unanswered", timeout_s=HANDOVER_TIMEOUT_S)
            return
        delivered = outcome.result()
        await _respond(
            msg,
            {
                "platform_ids": list(delivered.platform_ids),
                "given_up": delivered.given_up,
                "reason": delivered.reason,
            },
        )
        log.debug("cluster.hand_over_answered", given_up=delivered.given_up is not None)


async def _unsubscribe(subscription: Subscription) -> None:
    # A closing connection ends the subscription anyway.
    with contextlib.suppress(*NATS_ERRORS):
        await subscription.unsubscribe()


async def _respond(msg: Msg, answer: dict[str, object]) -> None:
    try:
        await msg.respond(json.dumps(answer).encode("utf-8"))
    except NATS_ERRORS as error:
        # The requester times out; the reply is offered again and this outcome given then.
        log.info("cluster.hand_over_answer_lost", error=str(error) or type(error).__name__)


async def hand_over(
    client: Client, names: ClusterNames, envelope: OutboundEnvelope, msg_id: str
) -> Delivered | None:
    """`envelope`'s reply delivered by the ingress that showed its turn live (`live_at`).

    None when that ingress is gone or no longer runs the profile: deliver it here, whole.
    A timeout raises (the reply is offered again).
    """
    assert envelope.live_at is not None
    headers = {**envelope.headers(msg_id), LIVE_KIND: FINAL}
    deadline = asyncio.get_running_loop().time() + HANDOVER_TIMEOUT_S
    while True:
        try:
            response = await client.request(
                names.live_subject(envelope.live_at),
                envelope.body(),
                timeout=ASK_AGAIN_AFTER_S,
                headers=headers,
            )
            break
        except NoRespondersError:
            log.info(
                "cluster.live_ingress_gone", ingress=envelope.live_at, profile=envelope.profile
            )
            return None
        except TimeoutError:
            # Still delivering (a repeat waits for the same outcome), or killed meanwhile.
            if asyncio.get_running_loop().time() >= deadline:
                raise
    answer = json.loads(response.data)
    if answer.get("not_here"):
        log.info("cluster.live_profile_gone", ingress=envelope.live_at, profile=envelope.profile)
        return None
    return Delivered(
        tuple(answer["platform_ids"]), given_up=answer["given_up"], reason=answer.get("reason")
    )
