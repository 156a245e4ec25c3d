"""The worker on real NATS JetStream and PostgreSQL: answered once, replayed not recomputed,
retries recognised, and a message that always fails buried while its partition flows on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

import pytest
from nats.aio.client import Client
from structlog.testing import capture_logs

from bus import (
    AgentMessage,
    InboundMessage,
    Message,
    OutboundMessage,
    SessionKey,
    TaskComplete,
    TaskUpdate,
)
from bus.message import TaggedModel
from gateway.cluster.codec import DEAD_REASON, MSG_ID, InboundEnvelope, platform_id
from gateway.cluster.node_service import StatusBoard
from gateway.cluster.streams import ensure_streams, ensure_worker_consumers, names_of
from gateway.cluster.worker import ABANDONED_REASON
from sessions.errors import SessionError
from sessions.postgres import PostgresSessionStore
from sessions.store import AppendReceipt
from tests.cluster.harness import RunningWorker, nats_config, running_worker
from tests.support.postgres import fresh_scope, session_messages


def message(text: str, *, chat: str = "chat-1", message_id: str | None = None) -> InboundMessage:
    return InboundMessage(
        channel="telegram",
        sender_id="7",
        chat_id=chat,
        content=text,
        message_id=message_id or text,
    )


def reply_texts(worker: RunningWorker) -> list[str]:
    return [OutboundMessage.model_validate_json(seen.data).content for seen in worker.replies()]


async def stored_in_chat_1(dsn: str, profile: str) -> list[tuple[str, str]]:
    """What the store holds for `profile`'s chat-1 (where `message` writes by default),
    archived sessions too."""
    key = f"{profile}:telegram:chat-1"
    return await session_messages(dsn, profile, key, archived_too=True)


async def test_a_message_is_answered_stored_and_acknowledged(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> None:
    profile = fresh_scope()
    async with running_worker(nats_client, nats_prefix, postgres_dsn, profile, tmp_path) as w:
        await w.publish_until_acked(message("hello worker"))
        assert reply_texts(w) == ["hello worker"]
        (reply,) = w.replies()
        stored = OutboundMessage.model_validate_json(reply.data)
        assert reply.headers[MSG_ID] == stored.delivery_id  # the turn id
        # The turn's status, in the domain's words, for every process's board.
        board = StatusBoard()
        for seen in w.observer.on(w.names.status_subject):
            update = AgentMessage.from_json(seen.data)
            assert str(update.task_id()) == stored.delivery_id
            board.apply(update)
            if isinstance(update.root, TaskUpdate):
                assert [t.worker for t in board.running()] == ["test-worker"]
        # Named with its type: mypy's join of two model classes is no class.
        statuses: list[type[TaggedModel]] = [TaskUpdate, TaskComplete]
        assert [
            type(AgentMessage.from_json(s.data).root) for s in w.observer.on(w.names.status_subject)
        ] == statuses
        assert board.running() == []
        assert await w.stream_emptied(w.names.inbound_stream) == 0
    assert await stored_in_chat_1(postgres_dsn, profile) == [
        ("user", "hello worker"),
        ("assistant", "hello worker"),
    ]


async def test_a_turn_whose_session_append_fails_stores_no_reply_and_runs_again(
    nats_client: Client,
    nats_prefix: str,
    postgres_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reply and the session's new messages commit in one transaction: an append that
    fails takes the stored reply back with it, so the retry answers (once) and appends."""
    profile = fresh_scope()
    real_append = PostgresSessionStore.append_all
    failures: list[SessionKey] = []

    async def append_failing_once(
        store: PostgresSessionStore,
        key: SessionKey,
        messages: Sequence[Message],
        *,
        lines: bytes | None = None,
    ) -> AppendReceipt:
        if not failures:
            failures.append(key)
            raise SessionError("the session store refused the write")
        return await real_append(store, key, messages, lines=lines)

    monkeypatch.setattr(PostgresSessionStore, "append_all", append_failing_once)
    async with running_worker(
        nats_client, nats_prefix, postgres_dsn, profile, tmp_path, retry_backoff_s=[0.05]
    ) as w:
        incoming = message("appended with its reply")
        await w.publish_until_acked(incoming)
        assert len(failures) == 1
        assert len(w.acks(b"-NAK")) == 1
        assert reply_texts(w) == ["appended with its reply"]
        # Answered afresh, not replayed: the failed append took its stored reply back.
        assert w.metrics.replayed_replies.labels(profile)._value.get() == 0
        inbound_id = platform_id(profile, incoming)
        assert inbound_id is not None
        record = await w.records.claim(profile, inbound_id, 0)
        assert record.answered
        assert record.appended
    assert await stored_in_chat_1(postgres_dsn, profile) == [
        ("user", "appended with its reply"),
        ("assistant", "appended with its reply"),
    ]


async def test_a_redelivery_after_the_reply_was_stored_republishes_it(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> None:
    """A worker that stored the reply and died before publishing: the next one re-publishes
    the stored reply (the agent is not asked again) and appends the stored messages."""
    profile = fresh_scope()
    incoming = message("asked before the crash")
    async with running_worker(
        nats_client, nats_prefix, postgres_dsn, profile, tmp_path, agent={"fail_when": "asked"}
    ) as w:
        # The consumers exist once the worker runs; stop it taking the message before we
        # have recorded the dead worker's work: the record comes first, then the publish.
        inbound_id = platform_id(profile, incoming)
        assert inbound_id is not None
        info = await w.js.stream_info(w.names.inbound_stream)
        record = await w.records.claim(profile, inbound_id, info.state.last_seq + 1)
        stored = OutboundMessage(
            channel="telegram", chat_id="chat-1", content="the stored reply", delivery_id="t"
        )
        key = f"{profile}:telegram:chat-1"
        await w.records.answer(
            record,
            key,
            stored,
            [Message.user("asked before the crash"), Message.assistant("the stored reply")],
        )
        ack = await w.publish(incoming)
        assert ack.seq == record.first_seq
        await w.observer.wait_for(lambda: len(w.acks()) == 1)
        # The agent would have failed this message: the reply came from the record.
        assert reply_texts(w) == ["the stored reply"]
        assert w.replies()[0].headers[MSG_ID] == record.turn_id
        assert w.metrics.replayed_replies.labels(profile)._value.get() == 1
    assert await session_messages(postgres_dsn, profile, key, archived_too=True) == [
        ("user", "asked before the crash"),
        ("assistant", "the stored reply"),
    ]


async def test_a_platform_retry_past_the_duplicate_window_is_not_answered_twice(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> None:
    profile = fresh_scope()
    async with running_worker(nats_client, nats_prefix, postgres_dsn, profile, tmp_path) as w:
        await w.publish_until_acked(message("only once"))
        # JetStream has forgotten the id (another Nats-Msg-Id): PostgreSQL has not.
        await w.publish_until_acked(message("only once"), msg_id="after-the-window")
        assert reply_texts(w) == ["only once"]
        assert w.metrics.dropped_duplicates.labels(profile)._value.get() == 1
        # A held request (the HTTP API) asking again gets the stored reply, where it waits.
        await w.publish(
            message("only once"),
            msg_id="a-request-retry",
            request=True,
            reply_subject=w.names.reply_subject("ingress-b"),
        )
        await w.observer.wait_for(lambda: len(w.acks()) == 3)
        assert reply_texts(w) == ["only once", "only once"]
        assert w.replies()[1].subject == w.names.reply_subject("ingress-b")
        assert await w.stream_emptied(w.names.inbound_stream) == 0


async def test_a_message_that_always_fails_is_a_dead_letter_and_its_partition_flows_on(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> None:
    profile = fresh_scope()
    async with running_worker(
        nats_client,
        nats_prefix,
        postgres_dsn,
        profile,
        tmp_path,
        agent={"fail_when": "poison"},
        max_deliver=3,
        retry_backoff_s=[0.05],
    ) as w:
        # The same chat, so the same partition: the poison comes first.
        await w.publish(message("poison pill"))
        await w.publish(message("the next message"))
        await w.observer.wait_for(lambda: len(w.acks()) == 1)
        assert len(w.acks(b"-NAK")) == 2  # delivered 3 times: 2 retries, then buried
        assert len(w.acks(b"+TERM")) == 1
        texts = reply_texts(w)
        assert len(texts) == 2
        assert texts[0].startswith("Sorry, I could not answer that: agent error.")
        assert texts[1] == "the next message"
        dead = w.observer.on(f"{nats_prefix}.dead.")
        assert len(dead) == 1
        assert "echo agent fails" in dead[0].headers[DEAD_REASON]
        assert json.loads(dead[0].data)["content"] == "poison pill"
        assert w.metrics.dead_letters.labels(profile, "agent_error")._value.get() == 1
        assert await w.stream_emptied(w.names.inbound_stream) == 0
        assert await w.stream_count(w.names.dead_stream) == 1


class DeliveryLimits(TypedDict):
    """The NATS settings a test of redelivery sets, for `nats_config` and `running_worker`."""

    max_deliver: int
    ack_wait_s: float


async def test_a_message_whose_last_delivery_never_finished_is_buried_not_lost(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> None:
    """Workers that die holding a message (killed, maybe by the message itself) use up its
    deliveries: the next delivery buries it instead of leaving it in the stream forever."""
    profile = fresh_scope()
    settings = DeliveryLimits(max_deliver=2, ack_wait_s=1)
    config = nats_config(nats_prefix, **settings)
    names = names_of(config)
    js = nats_client.jetstream(timeout=10)
    await ensure_streams(js, config)
    await ensure_worker_consumers(js, config)
    killer = message("a message its workers die of")
    partition = names.partition_of_chat(profile, killer)
    inbound_id = platform_id(profile, killer)
    assert inbound_id is not None
    envelope = InboundEnvelope(profile, inbound_id, killer)
    await js.publish(
        names.inbound_subject(partition), envelope.body(), headers=envelope.headers(inbound_id)
    )
    # Two workers take it and die without a word: nothing acknowledges either delivery.
    dead_workers = await js.pull_subscribe_bind(
        names.worker_consumer(partition), names.inbound_stream
    )
    for delivery in (1, 2):
        (taken,) = await dead_workers.fetch(1, timeout=10)
        assert taken.metadata.num_delivered == delivery
    await dead_workers.unsubscribe()
    async with running_worker(
        nats_client, nats_prefix, postgres_dsn, profile, tmp_path, **settings
    ) as w:
        await w.observer.wait_for(lambda: len(w.acks(b"+TERM")) == 1)
        dead = w.observer.on(f"{nats_prefix}.dead.")
        assert len(dead) == 1
        assert dead[0].headers[DEAD_REASON] == ABANDONED_REASON
        (notice,) = reply_texts(w)
        assert notice.startswith("Sorry, I could not answer that: abandoned.")
        assert w.metrics.dead_letters.labels(profile, "abandoned")._value.get() == 1
        assert await w.stream_emptied(w.names.inbound_stream) == 0


async def test_a_bounded_worker_finds_the_partitions_with_work(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> None:
    """One turn at a time over 4 partitions: it must not wait on empty ones while others
    have messages (each such wait would be the long fetch wait: 30 s here)."""
    profile = fresh_scope()
    async with running_worker(
        nats_client,
        nats_prefix,
        postgres_dsn,
        profile,
        tmp_path,
        worker_max_turns=1,
        fetch_wait_s=30,
    ) as w:
        chats = [f"chat-{n}" for n in range(6)]
        for chat in chats:
            await w.publish(message(f"hello from {chat}", chat=chat))
        await w.observer.wait_for(lambda: len(w.acks()) == len(chats), timeout_s=15)
        assert sorted(reply_texts(w)) == sorted(f"hello from {chat}" for chat in chats)


async def test_a_worker_takes_no_message_before_its_profiles_run(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> None:
    """A message fetched for a profile still opening could only fail, and JetStream counts
    that delivery: with a low `max_deliver` it could go to the dead letters unanswered."""
    profile = fresh_scope()
    opened = asyncio.Event()
    with capture_logs() as logged:
        async with running_worker(
            nats_client,
            nats_prefix,
            postgres_dsn,
            profile,
            tmp_path,
            profiles_opened=opened,
            max_deliver=2,
        ) as w:
            await w.publish(message("sent while the worker's profile opens"))
            await w.observer.wait_for(
                lambda: any(e["event"] == "cluster.worker_waiting" for e in logged)
            )
            opened.set()
            await w.observer.wait_for(lambda: len(w.acks()) == 1)
            assert reply_texts(w) == ["sent while the worker's profile opens"]
            assert w.acks(b"-NAK") == []
            assert await w.stream_count(w.names.dead_stream) == 0
