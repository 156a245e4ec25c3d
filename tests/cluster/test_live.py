"""Live events on real NATS: a worker's turn shows its snapshots and typing at the ingress
that took its message in (only what that channel shows), never held up by the publish; an
ingress's live subject takes a reply handed over once, however often it is asked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from bus import InboundMessage, OutboundMessage, StreamSnapshot, TypingStarted
from gateway.cluster.codec import (
    LIVE_AFTER,
    LIVE_KIND,
    MSG_ID,
    SNAPSHOT,
    Delivered,
    OutboundEnvelope,
    decode_live_signal,
)
from gateway.cluster.connection import connect, disconnect
from gateway.cluster.live import MAX_BACKLOG_BYTES, LiveTurn
from gateway.cluster.live_ingress import HeldSignals, LiveShows, hand_over
from gateway.cluster.streams import ClusterNames
from tests.cluster.harness import RunningWorker, Seen, nats_config, running_worker
from tests.support.postgres import fresh_scope

TEXT = "one two three four five six seven eight"
#: Pieces 50 ms apart: the agent's snapshots (at most one per 100 ms) are several.
STREAMING_ECHO = {"type": "echo", "delay_s": 0.05, "pieces": 8}


def message(chat: str, text: str = TEXT) -> InboundMessage:
    return InboundMessage(
        channel="telegram", sender_id="7", chat_id=chat, content=text, message_id=f"{chat}-1"
    )


def reply_of(seen: Seen) -> OutboundEnvelope:
    return OutboundEnvelope.decode(seen.headers, seen.data)


async def answered(worker: RunningWorker, count: int) -> list[OutboundEnvelope]:
    await worker.observer.wait_for(lambda: len(worker.replies()) == count)
    return [reply_of(seen) for seen in worker.replies()]


@pytest.fixture
async def w(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> AsyncIterator[RunningWorker]:
    """A worker whose echo agent streams."""
    async with running_worker(
        nats_client, nats_prefix, postgres_dsn, fresh_scope(), tmp_path, agent=STREAMING_ECHO
    ) as running:
        yield running


async def test_a_turn_shows_snapshots_and_typing_at_its_ingress_and_its_reply_names_it(
    w: RunningWorker, nats_prefix: str
) -> None:
    await w.publish(message("c1"), ingress="ingress-a", streams=True, shows_typing=True)
    [reply] = await answered(w, 1)
    # Published before the reply on the same connection: all of them are seen by now.
    events = w.observer.on(f"{nats_prefix}.live.ingress-a")
    assert events[0].headers[LIVE_KIND] == "typing-started"
    signals = [decode_live_signal(e.headers, e.data) for e in events[1:]]
    assert {p for p, _signal in signals} == {w.profile}
    snapshots = [s for _p, s in signals if isinstance(s, StreamSnapshot)]
    assert len(snapshots) == len(signals) >= 2
    assert all(TEXT.startswith(s.reply.content) for s in snapshots)
    # The reply is the final of that stream, to be delivered where it was shown.
    assert reply.live_at == "ingress-a"
    assert reply.message.content == TEXT
    assert reply.message.stream_id == reply.message.delivery_id
    assert {s.stream_id for s in snapshots} == {reply.message.stream_id}
    assert w.observer.on(f"{nats_prefix}.live.") == events  # nowhere else


async def test_a_channel_that_cannot_edit_gets_typing_only_and_one_showing_nothing_nothing(
    w: RunningWorker, nats_prefix: str
) -> None:
    await w.publish(message("c1"), ingress="ingress-a", shows_typing=True)
    [typed] = await answered(w, 1)
    await w.publish(message("c2"), ingress="ingress-a")
    _typed, silent = await answered(w, 2)
    events = w.observer.on(f"{nats_prefix}.live.")
    assert [decode_live_signal(e.headers, e.data)[1] for e in events] == [
        TypingStarted("telegram", "c1")
    ]
    assert (typed.live_at, typed.message.stream_id) == ("ingress-a", None)
    assert (silent.live_at, silent.message.stream_id) == (None, None)
    assert typed.message.content == silent.message.content == TEXT


async def test_live_events_are_skipped_not_waited_for_when_the_connection_cannot_take_them(
    nats_prefix: str,
) -> None:
    config = nats_config(nats_prefix)
    client = await connect(config, name="live-test")
    subject = f"{nats_prefix}.live.nobody"
    live = LiveTurn(client, subject, "p", streams=True, shows_typing=True)
    try:
        # The flusher has not run yet (nothing awaited in between yields to it): the buffer
        # holds more than the bound, so the event is skipped rather than queued behind it.
        await client.publish(f"{nats_prefix}.filler", b"x" * (MAX_BACKLOG_BYTES + 1))
        await live.send(TypingStarted("telegram", "c1"))
        assert live.skipped == 1
        await client.flush()
        await live.send(TypingStarted("telegram", "c1"))
        assert live.skipped == 1
    finally:
        await disconnect(client)
    # A closed connection: skipped too, and the turn goes on.
    await live.send(TypingStarted("telegram", "c1"))
    assert live.skipped == 2


class Lanes:
    """A profile's lanes as the live side sees them: what it was given, and one outcome."""

    def __init__(self) -> None:
        self.shown: list[object] = []
        self.queued: list[OutboundMessage] = []
        #: Both, in the order they joined the lane.
        self.order: list[object] = []
        self.outcome: asyncio.Future[Delivered] = asyncio.get_running_loop().create_future()
        self.changed = asyncio.Event()

    async def show(self, signal: object) -> None:
        self.shown.append(signal)
        self.order.append(signal)
        self.changed.set()

    async def queue(self, message: OutboundMessage) -> asyncio.Future[Delivered]:
        self.queued.append(message)
        self.order.append(message)
        self.changed.set()
        return self.outcome


async def test_a_reply_handed_over_twice_is_queued_once_and_both_get_its_outcome(
    nats_client: Client, nats_prefix: str
) -> None:
    names = ClusterNames(nats_prefix, 4)
    lanes = Lanes()
    final = OutboundMessage(
        channel="telegram", chat_id="c1", content=TEXT, stream_id="t1", delivery_id="t1"
    )
    envelope = OutboundEnvelope("p", final, live_at="ingress-s")
    async with LiveShows(nats_client, names, "ingress-s") as shows:
        shows.add_profile("p", lanes)
        first = asyncio.create_task(hand_over(nats_client, names, envelope, "t1"))
        second = asyncio.create_task(hand_over(nats_client, names, envelope, "t1"))
        while len(lanes.queued) < 1:
            lanes.changed.clear()
            await lanes.changed.wait()
        lanes.outcome.set_result(Delivered(("42",)))
        assert await first == await second == Delivered(("42",))
        assert lanes.queued == [final]
        # Another profile is not shown here: the asking ingress delivers it itself.
        other = OutboundEnvelope("q", final, live_at="ingress-s")
        assert await hand_over(nats_client, names, other, "t2") is None
    # Gone (closed): no responders, delivered by the asking ingress.
    assert await hand_over(nats_client, names, envelope, "t3") is None
    assert lanes.queued == [final]


async def test_a_reply_given_up_where_it_was_handed_comes_back_with_its_reason(
    nats_client: Client, nats_prefix: str
) -> None:
    # The asking ingress keeps it as a dead letter under the delivery layer's reason.
    names = ClusterNames(nats_prefix, 4)
    lanes = Lanes()
    final = OutboundMessage(channel="telegram", chat_id="c1", content=TEXT, delivery_id="t1")
    envelope = OutboundEnvelope("p", final, live_at="ingress-s")
    refused = Delivered(given_up="403 Forbidden: bot was blocked by the user", reason="auth")
    async with LiveShows(nats_client, names, "ingress-s") as shows:
        shows.add_profile("p", lanes)
        lanes.outcome.set_result(refused)
        assert await hand_over(nats_client, names, envelope, "t1") == refused


def snapshots_seen(worker: RunningWorker) -> list[Seen]:
    live = worker.observer.on(f"{worker.names.prefix}.live.")
    return [seen for seen in live if seen.headers[LIVE_KIND] == SNAPSHOT]


async def test_a_turn_behind_an_undelivered_reply_streams_after_it(
    w: RunningWorker,
) -> None:
    """A snapshot opens a message at once; the replies before it go the outbound stream's
    way. So a turn whose chat still has a reply there marks its live events to be shown
    after the last of them (the showing ingress holds them until it came)."""
    await w.publish(message("c1"), ingress="ingress-a", streams=True)
    [first] = await answered(w, 1)
    shown = snapshots_seen(w)
    assert shown
    assert all(LIVE_AFTER not in seen.headers for seen in shown)
    (first_seen,) = w.replies()
    # The first reply is still in the outbound stream: the next turn's events follow it.
    later = message("c1").model_copy(update={"message_id": "c1-2"})
    await w.publish(later, ingress="ingress-a", streams=True)
    await answered(w, 2)
    after = snapshots_seen(w)[len(shown) :]
    assert after
    assert {seen.headers[LIVE_AFTER] for seen in after} == {first_seen.headers[MSG_ID]}
    # Taken in at another ingress: its events follow the last reply waiting, wherever shown.
    elsewhere = message("c1").model_copy(update={"message_id": "c1-3"})
    await w.publish(elsewhere, ingress="ingress-b", streams=True)
    *_earlier, third = await answered(w, 3)
    second_seen = w.replies()[1]
    held = w.observer.on(f"{w.names.prefix}.live.ingress-b")
    assert held
    assert {seen.headers[LIVE_AFTER] for seen in held} == {second_seen.headers[MSG_ID]}
    assert third.live_at == "ingress-b"
    # Delivered (as an ingress would: fetched, acknowledged), the chat streams freely again.
    partition = w.names.partition_of_chat(w.profile, later)
    delivery = await w.js.pull_subscribe_bind(
        durable=w.names.delivery_consumer("telegram", partition), stream=w.names.outbound_stream
    )
    for _ in range(3):  # one message at a time: the consumer keeps one in flight
        (msg,) = await delivery.fetch(1, timeout=10)
        await msg.ack_sync()
    fourth = message("c1").model_copy(update={"message_id": "c1-4"})
    await w.publish(fourth, ingress="ingress-b", streams=True)
    await answered(w, 4)
    free = w.observer.on(f"{w.names.prefix}.live.ingress-b")[len(held) :]
    assert [seen for seen in free if seen.headers[LIVE_KIND] == SNAPSHOT]
    assert all(LIVE_AFTER not in seen.headers for seen in free)
    assert first.message.content == TEXT


async def test_live_events_marked_after_a_reply_are_shown_right_behind_it_or_dropped(
    nats_client: Client, nats_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ClusterNames(nats_prefix, 4)
    lanes = Lanes()
    subject = names.live_subject("ingress-s")
    final = OutboundMessage(channel="telegram", chat_id="c1", content=TEXT, delivery_id="t1")
    next_turn = LiveTurn(nats_client, subject, "p", streams=True, shows_typing=True, after="t1")
    snapshot = StreamSnapshot(
        OutboundMessage(channel="telegram", chat_id="c1", content="the next", stream_id="t2")
    )
    async with LiveShows(nats_client, names, "ingress-s") as shows:
        shows.add_profile("p", lanes)
        await next_turn.send(TypingStarted("telegram", "c1"))
        await next_turn.send(snapshot)
        handed = asyncio.create_task(
            hand_over(nats_client, names, OutboundEnvelope("p", final, live_at="ingress-s"), "t1")
        )
        while len(lanes.order) < 3:
            lanes.changed.clear()
            await lanes.changed.wait()
        # Held until the reply before them joined the lane, then right behind it.
        assert lanes.order == [final, TypingStarted("telegram", "c1"), snapshot]
        lanes.outcome.set_result(Delivered(("42",)))
        await handed
        # Marked after a reply handed over already: shown at once.
        await next_turn.send(snapshot)
        while len(lanes.order) < 4:
            lanes.changed.clear()
            await lanes.changed.wait()
        # After a reply that never comes here: dropped once the hold ends, never shown late.
        monkeypatch.setattr("gateway.cluster.live_ingress.HOLD_S", 0.05)
        dropped = asyncio.Event()
        real_drop = HeldSignals._drop

        def drop(held: HeldSignals, key: tuple[str, str]) -> None:
            real_drop(held, key)
            dropped.set()

        monkeypatch.setattr(HeldSignals, "_drop", drop)
        orphan = LiveTurn(nats_client, subject, "p", streams=True, shows_typing=True, after="t9")
        await orphan.send(snapshot)
        await asyncio.wait_for(dropped.wait(), 10)
        late = OutboundMessage(channel="telegram", chat_id="c1", content="t9", delivery_id="t9")
        late_envelope = OutboundEnvelope("p", late, live_at="ingress-s")
        handed_late = asyncio.create_task(hand_over(nats_client, names, late_envelope, "t9"))
        while len(lanes.order) < 5:
            lanes.changed.clear()
            await lanes.changed.wait()
        assert lanes.order[3:] == [snapshot, late]
        handed_late.cancel()


async def test_live_events_after_a_reply_this_process_delivered_elsewhere_are_shown_then(
    nats_client: Client, nats_prefix: str
) -> None:
    """The reply they follow was shown at another ingress (or sent whole here, that one
    gone): this process's delivery layer tells when it is done, and they are shown then."""
    names = ClusterNames(nats_prefix, 4)
    lanes = Lanes()
    subject = names.live_subject("ingress-s")
    snapshot = StreamSnapshot(
        OutboundMessage(channel="telegram", chat_id="c1", content="the next", stream_id="t2")
    )
    async with LiveShows(nats_client, names, "ingress-s") as shows:
        shows.add_profile("p", lanes)
        held = LiveTurn(nats_client, subject, "p", streams=True, shows_typing=True, after="t1")
        await held.send(snapshot)
        await nats_client.flush()
        # Nothing shown before its reply is delivered; then at once, and later ones too.
        await shows.reply_delivered("p", "t2-unrelated")
        assert lanes.order == []
        await shows.reply_delivered("p", "t1")
        while not lanes.order:  # shown now, or as it comes if it had not come yet
            lanes.changed.clear()
            await lanes.changed.wait()
        assert lanes.order == [snapshot]
        await held.send(snapshot)
        while len(lanes.order) < 2:
            lanes.changed.clear()
            await lanes.changed.wait()
        assert lanes.order == [snapshot, snapshot]
