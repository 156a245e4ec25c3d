"""What waits behind a chat's message in its partition: read from the stream, and what each
`queue_mode` makes of it; on real NATS and PostgreSQL, messages stored before the worker runs
(what a stop or a collected turn finds after a restart, with no cancel notice to help)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from nats.aio.client import Client

from bus import ANSWERS, DELETE, EDIT, InboundMessage, OutboundMessage
from gateway.cluster.chat_queue import (
    Cancel,
    ChatChanged,
    RunningTurns,
    Waiting,
    plan,
    publish_notice,
)
from gateway.cluster.codec import InboundEnvelope, platform_id
from gateway.cluster.streams import ensure_streams, names_of
from tests.cluster.harness import nats_config, running_worker
from tests.support.postgres import column, fresh_scope


def said(text: str, message_id: str, *, chat: str = "chat-1") -> InboundMessage:
    return InboundMessage(
        channel="telegram", sender_id="7", chat_id=chat, content=text, message_id=message_id
    )


def envelope(text: str, message_id: str, *, request: bool = False) -> InboundEnvelope:
    return InboundEnvelope("p", message_id, said(text, message_id), request=request)


def behind(*texts: str) -> list[Waiting]:
    return [Waiting(seq, envelope(text, f"w{seq}")) for seq, text in enumerate(texts, start=2)]


def edit_of(target: str, text: str, seq: int) -> Waiting:
    """The sender's edit of the message `target`, stored at `seq`."""
    edited = said(text, f"{target}:edit:{seq}").model_copy(
        update={"metadata": {EDIT: {"message_id": target}}}
    )
    return Waiting(seq, InboundEnvelope("p", f"e{seq}", edited))


def delete_of(target: str, seq: int) -> Waiting:
    deleted = said("", f"{target}:delete").model_copy(
        update={"metadata": {DELETE: {"message_id": target}}}
    )
    return Waiting(seq, InboundEnvelope("p", f"d{seq}", deleted))


def contents(waiting: list[Waiting]) -> list[str]:
    return [w.envelope.message.content for w in waiting]


def test_a_stop_waiting_behind_drops_a_turn_or_a_command_but_not_a_stop_or_a_status() -> None:
    waiting = behind("more", "/stop")
    assert plan("followup", envelope("hello", "1"), waiting).dropped_by == "stop"
    assert plan("collect", envelope("/reset", "1"), waiting).dropped_by == "stop"
    assert plan("followup", envelope("stop", "1"), waiting).dropped_by is None
    assert plan("followup", envelope("/status", "1"), behind("停止")).dropped_by is None


def test_interrupt_drops_a_turn_when_a_newer_message_waits() -> None:
    assert plan("interrupt", envelope("hello", "1"), behind("newer")).dropped_by == "interrupt"
    assert plan("interrupt", envelope("hello", "1"), behind("/sessions")).dropped_by is None
    assert plan("followup", envelope("hello", "1"), behind("newer")).dropped_by is None


def test_collect_joins_up_to_the_first_command_and_never_a_request() -> None:
    joined = plan("collect", envelope("one", "1"), behind("two", "three", "/new x", "four"))
    assert [w.envelope.message.content for w in joined.joined] == ["two", "three"]
    assert plan("collect", envelope("one", "1"), behind("/help", "two")).joined == []
    held = envelope("one", "1", request=True)
    assert plan("collect", held, behind("two")).joined == []
    asked = [Waiting(2, envelope("two", "2", request=True))]
    assert plan("collect", envelope("one", "1"), asked).joined == []
    assert plan("followup", envelope("one", "1"), behind("two")).joined == []


def test_an_edit_waiting_behind_its_message_gives_it_the_last_new_text() -> None:
    first, second = edit_of("1", "second", 3), edit_of("1", "second!", 4)
    waiting = [*behind("other"), first, edit_of("1", "/reset", 5), second]
    planned = plan("followup", envelope("secnod", "1"), waiting)
    assert planned.dropped_by is None
    assert planned.edited is not None
    assert (planned.edited.content, planned.edited.message_id) == ("second!", "1")
    # The edit into a command is not used up: it is ignored when its own turn comes.
    assert planned.absorbed == [first, second]
    # Only `edits: replace` puts an edit in place, and only into a text.
    for mode in ("new_turn", "ignore"):
        assert plan("followup", envelope("secnod", "1"), waiting, edits=mode).edited is None
    assert plan("followup", envelope("/new", "1"), [first]).edited is None


def test_a_delete_waiting_behind_its_message_drops_it() -> None:
    delete = delete_of("1", 3)
    for text in ("hello", "/reset"):
        planned = plan("followup", envelope(text, "1"), [*behind("other"), delete])
        assert (planned.dropped_by, planned.absorbed) == ("deleted", [delete])
    assert plan("followup", envelope("/stop", "1"), [delete]).dropped_by is None
    # A delete of another message drops nothing here.
    assert plan("followup", envelope("hello", "1"), [delete_of("0", 3)]).dropped_by is None


def test_waiting_messages_read_as_their_edits_and_deletes_leave_them() -> None:
    own = envelope("hello", "1")
    # Interrupt: the newer message was deleted; an edit of this one is no newer message...
    deleted_newer = [*behind("newer"), delete_of("w2", 3), edit_of("1", "hello!", 4)]
    assert plan("interrupt", own, deleted_newer).dropped_by is None
    # ... but an edit of a message whose turn is over is one (it runs as a turn of its own).
    assert plan("interrupt", own, [edit_of("0", "fixed", 2)]).dropped_by == "interrupt"
    # A stop is no message waiting its turn (it was answered at once): a delete leaves it.
    assert plan("followup", own, [*behind("/stop"), delete_of("w2", 3)]).dropped_by == "stop"
    # Collect: the edited text is joined with its edit; a deleted message is not.
    waiting = [
        *behind("two", "three"),
        edit_of("w2", "TWO", 4),
        delete_of("w3", 5),
        edit_of("0", "zero", 6),
        Waiting(7, envelope("four", "w7")),
    ]
    planned = plan("collect", own, waiting)
    assert contents(planned.joined) == ["TWO", "[edited] zero", "four"]
    assert planned.absorbed == [waiting[2]]
    assert contents(planned.closed_with) == ["TWO", "[edited] zero", "four", "TWO"]


async def test_a_cancel_before_the_turn_starts_means_it_never_starts() -> None:
    turns: RunningTurns[str] = RunningTurns()
    ran: list[str] = []

    async def work() -> str:
        ran.append("ran")
        return "answer"

    with turns.taken("p", "p:telegram:chat-1", 5) as taken:
        # A cancel for a later message (seq 9) reaches the message taken at seq 5 ...
        assert turns.cancel(
            Cancel(profile="p", chat="p:telegram:chat-1", before_seq=9, reason="stop")
        )
        assert await taken.run(work(), name="turn") is None
    assert ran == []
    with turns.taken("p", "p:telegram:chat-1", 9) as taken:
        # ... never the message that sent it, nor one after it.
        assert not turns.cancel(
            Cancel(profile="p", chat="p:telegram:chat-1", before_seq=9, reason="stop")
        )
        assert await taken.run(work(), name="turn") == "answer"


async def test_a_cancel_that_comes_before_its_message_is_taken_cancels_it_as_it_is_taken() -> None:
    turns: RunningTurns[str] = RunningTurns()
    # Still being fetched (or its row claimed) when the stop's notice came: nothing to cancel.
    stop = Cancel(profile="p", chat="chat", before_seq=7, reason="stop")
    assert not turns.cancel(stop)
    with turns.taken("p", "chat", 6) as taken:
        assert taken.reason == "stop"
    with turns.taken("p", "chat", 6, cancellable=False) as command:
        assert command.reason is None  # a command is answered
        assert not turns.cancel(stop)
    with turns.taken("p", "chat", 8) as later:
        assert later.reason is None
    with turns.taken("p", "another chat", 6) as elsewhere:
        assert elsewhere.reason is None


async def test_a_cancel_ends_a_running_turn() -> None:
    turns: RunningTurns[str] = RunningTurns()
    started = asyncio.Event()

    async def forever() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    with turns.taken("p", "chat", 1) as taken:
        running = asyncio.create_task(taken.run(forever(), name="turn"))
        await started.wait()
        turns.cancel(Cancel(profile="p", chat="chat", before_seq=2, reason="interrupt"))
        assert await running is None
        assert taken.reason == "interrupt"


async def publish_before_the_worker(
    client: Client, prefix: str, profile: str, messages: list[InboundMessage]
) -> None:
    config = nats_config(prefix)
    names = names_of(config)
    js = client.jetstream(timeout=10)
    await ensure_streams(js, config)
    for number, message in enumerate(messages):
        inbound_id = platform_id(profile, message)
        assert inbound_id is not None
        stored = InboundEnvelope(profile, inbound_id, message)
        partition = names.partition_of_chat(profile, message)
        await js.publish(
            names.inbound_subject(partition),
            stored.body(),
            headers=stored.headers(f"{inbound_id}.{number}"),  # past the duplicate window
        )


async def settled_rows(dsn: str, profile: str) -> list[object]:
    return await column(
        dsn,
        "SELECT settled FROM octos_cluster_turns WHERE scope = $1 AND settled IS NOT NULL "
        "ORDER BY first_seq",
        profile,
    )


async def test_what_waits_before_a_stop_is_dropped_without_a_turn(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> None:
    profile = fresh_scope()
    messages = [said("a long question", "1"), said("/reset", "2"), said("/stop", "3")]
    await publish_before_the_worker(nats_client, nats_prefix, profile, messages)
    async with running_worker(nats_client, nats_prefix, postgres_dsn, profile, tmp_path) as w:
        await w.observer.wait_for(lambda: len(w.acks()) == 3)
        texts = [OutboundMessage.model_validate_json(s.data).content for s in w.replies()]
        assert texts == ["🛑 Cancelled."]
    assert await settled_rows(postgres_dsn, profile) == ["stop", "stop"]


async def test_collect_joins_what_waits_and_asks_a_platform_retry_once(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> None:
    profile = fresh_scope()
    # "two" twice: the platform sent it again after JetStream's duplicate window.
    messages = [said("one", "1"), said("two", "2"), said("two", "2"), said("three", "3")]
    await publish_before_the_worker(nats_client, nats_prefix, profile, messages)
    async with running_worker(nats_client, nats_prefix, postgres_dsn, profile, tmp_path) as w:
        await w.observer.wait_for(lambda: len(w.acks()) == 4)
        (reply,) = [OutboundMessage.model_validate_json(s.data) for s in w.replies()]
        assert reply.content == "one\n---\nQueued #2: two\n---\nQueued #3: three"
        assert reply.metadata[ANSWERS] == ["1", "2", "3"]
        assert reply.reply_to == "3"
        assert w.metrics.dropped_duplicates.labels(profile)._value.get() == 1
    assert await settled_rows(postgres_dsn, profile) == ["joined", "joined"]


async def test_the_memory_of_cancels_covers_what_is_stored_after_it_began_with_no_gap(
    nats_client: Client, nats_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a worker may trust its cancels instead of reading what waits behind a message:
    only for messages stored once it followed them, and not past a forgotten chat or a
    reconnect (each of which moves the start on)."""
    config = nats_config(nats_prefix)
    names = names_of(config)
    js = nats_client.jetstream(timeout=10)
    await ensure_streams(js, config)

    async def stored(text: str) -> int:
        stored = InboundEnvelope("p", text, said(text, text))
        ack = await js.publish(
            names.inbound_subject(0), stored.body(), headers=stored.headers(text)
        )
        return ack.seq

    before = await stored("before the worker followed")
    turns: RunningTurns[bool] = RunningTurns()  # its one turn is an event's wait
    assert not await turns.knows_cancels_behind(before)  # not following yet
    await turns.follow_for(nats_client, names.cancel_subject, js, names.inbound_stream)
    try:
        after = await stored("after")
        assert not await turns.knows_cancels_behind(before)
        assert await turns.knows_cancels_behind(after)
        # After a reconnect the start is read again: what was stored meanwhile is read too.
        meanwhile = await stored("stored while reconnecting")
        nats_client.stats["reconnects"] += 1
        assert not await turns.knows_cancels_behind(meanwhile)
        assert await turns.knows_cancels_behind(meanwhile + 1)
        # A notice published now reaches the memory, and the turn it names.
        with turns.taken("p", "chat-a", meanwhile + 5) as taken:
            running = asyncio.create_task(taken.run(asyncio.Event().wait(), name="turn"))
            stop = Cancel(profile="p", chat="chat-a", before_seq=meanwhile + 10, reason="stop")
            await publish_notice(nats_client, names.cancel_subject, stop)
            assert await asyncio.wait_for(running, 10) is None
        # Forgetting that chat's cancel (more chats than remembered) moves the start past it.
        monkeypatch.setattr(RunningTurns, "REMEMBERED", 1)
        turns.cancel(Cancel(profile="p", chat="chat-b", before_seq=meanwhile + 20, reason="stop"))
        assert not await turns.knows_cancels_behind(meanwhile + 9)
        assert await turns.knows_cancels_behind(meanwhile + 10)
    finally:
        await turns.unfollow()


async def test_an_edit_or_delete_notice_makes_the_chats_earlier_messages_read_what_waits(
    nats_client: Client, nats_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = nats_config(nats_prefix)
    names = names_of(config)
    js = nats_client.jetstream(timeout=10)
    await ensure_streams(js, config)
    turns: RunningTurns[bool] = RunningTurns()
    await turns.follow_for(nats_client, names.cancel_subject, js, names.inbound_stream)
    try:
        stored = InboundEnvelope("p", "x", said("x", "x"))
        ack = await js.publish(names.inbound_subject(0), stored.body(), headers=stored.headers("x"))
        edit_seq = ack.seq + 5
        assert await turns.knows_what_waits("p", "chat-a", edit_seq - 1)
        change = ChatChanged(profile="p", chat="chat-a", seq=edit_seq)
        await publish_notice(nats_client, names.cancel_subject, change)
        # Notices come in order: once a stop published after it ended its turn, it is known.
        with turns.taken("p", "chat-b", edit_seq) as taken:
            running = asyncio.create_task(taken.run(asyncio.Event().wait(), name="turn"))
            stop = Cancel(profile="p", chat="chat-b", before_seq=edit_seq + 1, reason="stop")
            await publish_notice(nats_client, names.cancel_subject, stop)
            assert await asyncio.wait_for(running, 10) is None
        assert not await turns.knows_what_waits("p", "chat-a", edit_seq - 1)
        assert await turns.knows_what_waits("p", "chat-a", edit_seq)
        assert await turns.knows_what_waits("p", "chat-b", edit_seq - 1)
        # Forgetting that chat's change moves the start past it, for every chat.
        monkeypatch.setattr(RunningTurns, "REMEMBERED", 1)
        turns.changed(ChatChanged(profile="p", chat="chat-c", seq=edit_seq + 10))
        assert not await turns.knows_what_waits("p", "chat-b", edit_seq - 1)
        assert await turns.knows_what_waits("p", "chat-a", edit_seq)
    finally:
        await turns.unfollow()
