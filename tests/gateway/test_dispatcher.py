"""The dispatcher in process: a journal on disk, a fake agent the test controls, a recording
channel, and the bus's outbound end read directly (no channel manager, no subprocess)."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from bus import (
    FAILED,
    BusPublisher,
    InboundMessage,
    InboundRefused,
    OutboundMessage,
    create_bus,
)
from config import ProfileConfig
from gateway.agents import Agent, AgentReply, AgentTurn, SnapshotSink
from gateway.metrics import GatewayMetrics
from gateway.services import ProfileServices
from gateway.turn.commands import Commands
from gateway.turn.dispatcher import Dispatcher, DispatcherSettings
from gateway.turn.journal import Journal, Received
from gateway.turn.lanes import QueueMode
from gateway.turn.runner import TurnRunner
from sessions import ActiveTopics, SessionManager, SessionStore, durable
from sessions.wal import log as wal_log
from tests.channels.recording import RecordingChannel

WAIT_S = 5.0


class GatedAgent(Agent):
    """Echoes; a message whose text starts with "hold" waits until the test releases it."""

    kind = "gated"

    def __init__(self) -> None:
        self.started: asyncio.Queue[str] = asyncio.Queue()
        self.release = asyncio.Event()
        self.seen: list[str] = []

    async def run(self, turn: AgentTurn, on_snapshot: SnapshotSink) -> AgentReply:
        text = turn.message.content
        self.seen.append(text)
        self.started.put_nowait(text)
        if text.startswith("hold"):
            await self.release.wait()
        return AgentReply(text)


@dataclass
class Rig:
    dispatcher: Dispatcher
    journal: Journal
    agent: GatedAgent
    publisher: BusPublisher[Received]
    sessions: SessionManager
    task: asyncio.Task[None]
    registry: CollectorRegistry
    replies: list[OutboundMessage] = field(default_factory=list)

    async def send(self, message: InboundMessage) -> None:
        """As a channel sends: through the bus's publisher, returning once journaled."""
        sender = self.publisher.inbound_sender()
        try:
            await sender.send(message)
        finally:
            sender.close()

    def waiting(self) -> float | None:
        """The inbound queue depth a scrape reads now."""
        labels = {"profile": "p", "direction": "inbound"}
        return self.registry.get_sample_value("octos_queue_depth", labels)

    async def reply(self) -> OutboundMessage:
        """The next whole reply (typing signals and snapshots are skipped)."""
        while True:
            event = await asyncio.wait_for(self.publisher.recv_outbound(), WAIT_S)
            assert event is not None
            if isinstance(event, OutboundMessage):
                self.replies.append(event)
                return event


def said(text: str, message_id: str, chat: str = "c1") -> InboundMessage:
    return InboundMessage(
        channel="rec", sender_id="alice", chat_id=chat, content=text, message_id=message_id
    )


@asynccontextmanager
async def running(
    root: Path,
    *,
    mode: QueueMode = "followup",
    per_chat: int = 256,
    agent: GatedAgent | None = None,
    checkpoint_records: int = 10_000,
    replies_per_channel: int | None = None,
) -> AsyncIterator[Rig]:
    agent = agent or GatedAgent()
    channel = RecordingChannel("rec")
    registry = CollectorRegistry()
    metrics = GatewayMetrics.create(registry)
    handle, publisher = create_bus(carries=Received, replies_per_channel=replies_per_channel)
    async with SessionStore(root, fsync="never", track_unsynced=True) as store:
        journal = Journal(root / "journal", fsync="batch", checkpoint_records=checkpoint_records)
        recovery = await journal.open()
        sessions = SessionManager(store)
        topics = ActiveTopics(root)
        config = ProfileConfig.model_validate(
            {"queue_mode": mode, "sessions": {"max_history": 50, "fork_copy": 5}}
        )
        services = ProfileServices("p", config, sessions, topics, metrics, root)
        dispatcher = Dispatcher(
            DispatcherSettings("p", mode, "gated", max_backlog_per_chat=per_chat),
            services,
            journal,
            lambda name: channel if name == "rec" else None,
            TurnRunner(services, {"default": agent}, handle),
            Commands(services),
            handle,
        )
        publisher.log_through(dispatcher.intake)
        task = asyncio.create_task(dispatcher.run(recovery), name="dispatcher-under-test")
        await dispatcher.wait_ready()
        try:
            yield Rig(dispatcher, journal, agent, publisher, sessions, task, registry)
        finally:
            agent.release.set()
            dispatcher.stop_intake()
            await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), WAIT_S)
            await journal.close()


async def test_a_message_is_answered_and_both_sides_are_in_the_session(tmp_path: Path) -> None:
    async with running(tmp_path) as rig:
        await rig.send(said("hello", "1"))
        reply = await rig.reply()
        assert (reply.content, reply.reply_to) == ("hello", "1")
        assert reply.delivery_id is not None
        session = await rig.sessions.get(said("", "").session_key("p"))
        assert [m.content for m in session.messages] == ["hello", "hello"]


async def test_a_checkpoint_asked_for_while_one_runs_is_not_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(tmp_path, checkpoint_records=4) as rig:
        store = rig.sessions.store
        sync_entered, sync_released = asyncio.Event(), asyncio.Event()
        store_sync = store.sync

        async def held_sync() -> None:
            sync_entered.set()
            await sync_released.wait()
            await store_sync()

        monkeypatch.setattr(store, "sync", held_sync)
        # Whether each checkpoint had records enough behind it when it started.
        wanted: list[bool] = []
        second_started = asyncio.Event()
        journal_checkpoint = rig.journal.checkpoint

        async def checkpoint(sync_sessions: Callable[[], Awaitable[None]]) -> None:
            wanted.append(rig.journal.wants_checkpoint())
            if len(wanted) == 2:
                second_started.set()
            await journal_checkpoint(sync_sessions)

        monkeypatch.setattr(rig.journal, "checkpoint", checkpoint)
        number = 0

        async def answered(message_count: int) -> None:
            nonlocal number
            for _ in range(message_count):
                number += 1
                await rig.send(said(f"m{number}", str(number)))
                await rig.reply()

        await answered(3)
        await asyncio.wait_for(sync_entered.wait(), WAIT_S)
        # Records come while the first checkpoint waits for the session files: each asks again.
        await answered(3)
        sync_released.set()
        for _ in range(50):  # each message brings a few records: far more than enough
            if second_started.is_set():
                break
            await answered(1)
        assert second_started.is_set()
        assert wanted == [True, True]


async def test_a_platform_retry_is_not_a_second_turn(tmp_path: Path) -> None:
    async with running(tmp_path) as rig:
        await rig.send(said("once", "7"))
        await rig.reply()
        await rig.send(said("once", "7"))
        await rig.send(said("next", "8"))
        assert (await rig.reply()).content == "next"
        assert rig.agent.seen == ["once", "next"]


async def test_abort_cancels_the_running_turn_and_answers_in_its_language(tmp_path: Path) -> None:
    async with running(tmp_path) as rig:
        await rig.send(said("hold on", "1"))
        assert await asyncio.wait_for(rig.agent.started.get(), WAIT_S) == "hold on"
        await rig.send(said("停止", "2"))
        assert (await rig.reply()).content == "🛑 已取消。"
        # The cancelled turn is answered by nothing: the next message is the next reply.
        await rig.send(said("after", "3"))
        assert (await rig.reply()).content == "after"


async def test_interrupt_keeps_only_the_newest_message(tmp_path: Path) -> None:
    async with running(tmp_path, mode="interrupt") as rig:
        await rig.send(said("hold first", "1"))
        await asyncio.wait_for(rig.agent.started.get(), WAIT_S)
        await rig.send(said("second", "2"))
        assert (await rig.reply()).content == "second"


async def test_collect_joins_what_waited_into_one_turn(tmp_path: Path) -> None:
    async with running(tmp_path, mode="collect") as rig:
        await rig.send(said("hold first", "1"))
        await asyncio.wait_for(rig.agent.started.get(), WAIT_S)
        await rig.send(said("a", "2"))
        await rig.send(said("b", "3"))
        rig.agent.release.set()
        assert (await rig.reply()).content == "hold first"
        joined = await rig.reply()
        assert joined.content == "a\n---\nQueued #2: b"
        assert joined.metadata["octos.answers"] == ["2", "3"]


async def test_a_full_chat_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    async with running(tmp_path, per_chat=2) as rig:
        await rig.send(said("hold 1", "1"))
        await rig.send(said("two", "2"))
        with pytest.raises(InboundRefused) as refused:
            await rig.send(said("three", "3"))
        assert refused.value.http_status == 429
        assert refused.value.retry_after_s
        # Another chat is not affected.
        await rig.send(said("elsewhere", "4", chat="c2"))
        assert (await rig.reply()).content == "elsewhere"
        rig.agent.release.set()
        assert [(await rig.reply()).content for _ in range(2)] == ["hold 1", "two"]
    assert "three" not in rig.agent.seen


async def test_a_message_the_journal_cannot_store_is_refused_and_never_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its turn may start while the record is on its way to the disk; the record fails, so the
    turn's outcome (a later record of the broken log) fails too and no reply goes out."""

    def failing_disk(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    async with running(tmp_path) as rig:
        monkeypatch.setattr(wal_log, "sync_data", failing_disk)
        with pytest.raises(InboundRefused) as refused:
            await rig.send(said("lost", "1"))
        assert "journal cannot be written" in str(refused.value)
    events = [await rig.publisher.recv_outbound() for _ in range(rig.publisher.outbound_depth())]
    assert not [e for e in events if isinstance(e, OutboundMessage)]


async def test_the_queue_depth_a_scrape_reads_counts_what_is_unanswered_now(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as rig:
        assert rig.waiting() == 0
        await rig.send(said("hold 1", "1"))
        await rig.send(said("two", "2"))
        assert rig.waiting() == 2
        rig.agent.release.set()
        assert [(await rig.reply()).content for _ in range(2)] == ["hold 1", "two"]
        # Answered: the gauge says so without another message arriving to update it.
        assert rig.waiting() == 0


async def test_a_message_and_its_instant_answer_reach_the_log_in_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn starts while the message's record waits for the log's writer, and its outcome
    joins that hand-over: one write and one sync, not one for each (no delivery record here:
    the rig reads the bus's outbound end itself)."""
    hand_overs: list[int] = []
    syncs: list[int] = []
    real_seal, real_sync = wal_log.WriteAheadLog._seal, durable.sync_data

    def sealed(log: wal_log.WriteAheadLog) -> None:
        hand_overs.append(1)
        real_seal(log)

    def synced(fd: int) -> None:
        syncs.append(fd)
        real_sync(fd)

    # Before the journal is made: it gives its hand-over the bound `_seal`.
    monkeypatch.setattr(wal_log.WriteAheadLog, "_seal", sealed)
    async with running(tmp_path) as rig:
        monkeypatch.setattr(wal_log, "sync_data", synced)
        hand_overs.clear()
        await rig.send(said("at once", "1"))
        assert (await rig.reply()).content == "at once"
        assert (len(hand_overs), len(syncs)) == (1, 1)


async def test_a_failing_turn_is_answered_with_the_reason(tmp_path: Path) -> None:
    class Broken(GatedAgent):
        async def run(self, turn: AgentTurn, on_snapshot: SnapshotSink) -> AgentReply:
            raise RuntimeError("the model fell over")

    async with running(tmp_path, agent=Broken()) as rig:
        await rig.send(said("hi", "1"))
        reply = await rig.reply()
        assert reply.metadata.get(FAILED) is True
        assert "the model fell over" in reply.content


async def test_replies_past_their_channels_places_do_not_hold_a_start(tmp_path: Path) -> None:
    # Three replies journaled but never delivered (their platform was down at the crash); the
    # next start's bus has one place per channel: it must be ready at once, and the replies go
    # out in order as each delivery ends, before a new turn's.
    async with running(tmp_path) as rig:
        for number in range(3):
            await rig.send(said(f"before {number}", str(number), chat=f"c{number}"))
        assert {(await rig.reply()).content for _ in range(3)} == {f"before {n}" for n in range(3)}
        rig.task.cancel()
        await asyncio.gather(rig.task, return_exceptions=True)

    async with running(tmp_path, replies_per_channel=1) as rig:
        await rig.send(said("after", "9", chat="c0"))
        delivered: list[str] = []
        while len(delivered) < 4:
            reply = await rig.reply()
            delivered.append(reply.content)
            rig.publisher.finished(reply)
        assert delivered[3] == "after"
        assert sorted(delivered[:3]) == [f"before {n}" for n in range(3)]


async def test_what_was_unanswered_runs_again_after_a_crash_and_a_retry_is_recognised(
    tmp_path: Path,
) -> None:
    first = GatedAgent()
    async with running(tmp_path, agent=first) as rig:
        await rig.send(said("hold across a crash", "1"))
        await asyncio.wait_for(first.started.get(), WAIT_S)
        # A crash mid-turn: everything is cancelled, no outcome is written.
        rig.task.cancel()
        await asyncio.gather(rig.task, return_exceptions=True)
    second = GatedAgent()
    second.release.set()
    async with running(tmp_path, agent=second) as rig:
        assert (await rig.reply()).content == "hold across a crash"
        await rig.send(said("hold across a crash", "1"))  # the platform retries
        await rig.send(said("fresh", "2"))
        assert (await rig.reply()).content == "fresh"
        assert second.seen == ["hold across a crash", "fresh"]
