"""The journal: replay after a crash, dedup across restarts, checkpoints, session fix-ups."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pydantic_core
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus import EDIT, InboundMessage, Message, OutboundMessage, SessionKey, TokenUsage, new_turn_id
from bus.message import utc_now
from gateway.turn.journal import Journal, Outcome, OwnerSend, restore_sessions
from gateway.turn.journal.journal import missing_suffix
from gateway.turn.journal.records import decode, outcome_from
from gateway.turn.task import TurnTask
from sessions import SessionManager, SessionStore

_turns = itertools.count(1)


def inbound(text: str, message_id: str | None = None) -> InboundMessage:
    return InboundMessage(
        channel="telegram", sender_id="u", chat_id="c", content=text, message_id=message_id
    )


def outcome(ids: list[int], text: str | None) -> Outcome:
    reply = None if text is None else OutboundMessage(channel="telegram", chat_id="c", content=text)
    return Outcome(
        turn=f"turn-{next(_turns)}",
        answers=ids,
        session="p:telegram:c",
        messages=[Message.user("q"), Message.assistant(text or "")],
        reply=reply,
    )


def test_an_outcome_record_is_the_whole_record_serialized_and_reads_back() -> None:
    # The messages' session lines and the task's bytes are spliced into the record: the same
    # bytes as serializing the record whole, with the messages as their lines have them.
    turn = str(new_turn_id())
    task = TurnTask(turn, TokenUsage(input_tokens=2, output_tokens=2), utc_now())
    done = outcome([4, 5], "a reply")
    done.turn, done.task = turn, task
    encoded = done.encode()
    whole = {
        "k": "done",
        "turn": turn,
        "ids": [4, 5],
        "session": "p:telegram:c",
        "reply": done.reply,
        "msgs": [json.loads(message.to_line()) for message in done.messages],
        "task": task.as_task(),
    }
    assert encoded == pydantic_core.to_json(whole)
    assert done.session_lines() == b"".join(message.to_line() for message in done.messages)
    # Earlier builds wrote each message with every field: such a record reads back the same.
    earlier = pydantic_core.to_json({**whole, "msgs": done.messages})
    for record in (encoded, earlier):
        read = outcome_from(decode(record))
        assert (read.turn, read.answers, read.messages, read.reply, read.task) == (
            turn,
            [4, 5],
            done.messages,
            done.reply,
            task,
        )


def test_an_outcome_without_messages_records_an_empty_list() -> None:
    done = outcome([6], "cancelled")
    done.messages = []
    assert decode(done.encode())["msgs"] == []
    assert outcome_from(decode(done.encode())).messages == []


async def no_sessions() -> None:
    return None


async def test_a_restart_knows_what_was_unanswered_and_undelivered(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    await journal.open()
    first, durable = journal.accept(inbound("answered and delivered", "1"))
    await durable
    second, durable = journal.accept(inbound("answered, not delivered", "2"))
    await durable
    third, durable = journal.accept(inbound("never answered", "3"))
    await durable
    done = outcome([first.id], "reply one")
    await journal.record_outcome(done)
    journal.record_delivered(done.turn)
    await journal.record_outcome(outcome([second.id], "reply two"))
    await journal.close()

    again = Journal(tmp_path)
    recovery = await again.open()
    assert [r.message.content for r in recovery.pending] == ["never answered"]
    assert [o.reply.content for o in recovery.undelivered if o.reply] == ["reply two"]
    assert again.seen(inbound("x", "1")) == first.id
    assert again.seen(inbound("x", "3")) == third.id
    assert again.seen(inbound("x", "4")) is None
    await again.close()


async def test_edits_and_deletes_of_waiting_messages_outlive_a_restart_and_a_checkpoint(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    await journal.open()
    edited, durable = journal.accept(inbound("secnod", "7"))
    await durable
    deleted, durable = journal.accept(inbound("never mind", "8"))
    await durable
    edit = inbound("second", "7:edit:1").model_copy(
        update={"metadata": {EDIT: {"message_id": "7"}}}
    )
    await journal.record_edit(edited, edit)
    await journal.record_deleted(deleted)
    assert edited.message.content == "second"
    assert edited.message.message_id == "7"  # the original's id: the reply answers it
    await journal.close()

    for cut in (False, True):
        again = Journal(tmp_path)
        recovery = await again.open()
        assert [(r.id, r.message.content) for r in recovery.pending] == [(edited.id, "second")]
        # The edit's own id is a duplicate from now on; so is the deleted message's.
        assert again.seen(edit) == edited.id
        assert again.seen(inbound("x", "8")) == deleted.id
        if cut:
            await again.checkpoint(no_sessions)
        await again.close()


async def test_a_checkpoint_keeps_dedup_and_unfinished_work(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    await journal.open()
    ids = []
    for index in range(20):
        received, durable = journal.accept(inbound(f"m{index}", f"id{index}"))
        await durable
        ids.append(received.id)
    for inbound_id in ids[:15]:
        done = outcome([inbound_id], f"reply {inbound_id}")
        await journal.record_outcome(done)
        journal.record_written(done.turn)
        journal.record_delivered(done.turn)
    await journal.checkpoint(no_sessions)
    await journal.close()
    assert len(await asyncio.to_thread(lambda: list(tmp_path.glob("*.wal")))) == 1

    again = Journal(tmp_path)
    recovery = await again.open()
    assert [r.id for r in recovery.pending] == ids[15:]
    assert recovery.undelivered == []
    assert all(again.seen(inbound("x", f"id{index}")) is not None for index in range(20))
    received, _durable = again.accept(inbound("next"))
    assert received.id == ids[-1] + 1
    await again.close()


async def test_a_backlog_larger_than_the_threshold_does_not_checkpoint_at_every_record(
    tmp_path: Path,
) -> None:
    # A checkpoint rewrites every unanswered message: counting that rewrite toward the next
    # checkpoint would start another one at the next record, for as long as the backlog lasts.
    journal = Journal(tmp_path, checkpoint_records=10)
    await journal.open()
    for index in range(30):
        _received, durable = journal.accept(inbound(f"m{index}"))
        await durable
    assert journal.wants_checkpoint()
    await journal.checkpoint(no_sessions)
    appended_before_due = 0
    while not journal.wants_checkpoint():
        _received, durable = journal.accept(inbound(f"more{appended_before_due}"))
        await durable
        appended_before_due += 1
    # As many records again as the snapshot rewrote (its 30 messages and the id counter).
    assert appended_before_due == 31
    await journal.checkpoint(no_sessions)
    await journal.close()


async def test_a_stream_cut_off_is_found_again_by_its_messages_and_retired_once_delivered(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    await journal.open()
    cut, durable = journal.accept(inbound("cut off mid-stream", "1"))
    await durable
    journal.start_turn("turn-cut", [cut.id])
    await journal.record_opened("turn-cut", "telegram", "c", 0, "501")
    await journal.record_opened("turn-cut", "telegram", "c", 1, "502")
    await journal.close()

    # After a crash: the turn that runs again for the message takes the earlier turn's id.
    again = Journal(tmp_path)
    await again.open()
    assert again.resumed_turn([cut.id]) == "turn-cut"
    # Restated by a checkpoint as well.
    await again.checkpoint(no_sessions)
    await again.close()
    third = Journal(tmp_path)
    await third.open()
    assert third.resumed_turn([cut.id]) == "turn-cut"
    assert third.opened_parts("turn-cut", "telegram", "c") == {0: "501", 1: "502"}
    assert third.opened_parts("turn-cut", "telegram", "other chat") == {}
    third.start_turn("turn-cut", [cut.id])
    done = outcome([cut.id], "the whole reply")
    done.turn = "turn-cut"
    await third.record_outcome(done)
    # Answered, not yet delivered: still there for the reply's delivery.
    assert third.opened_parts("turn-cut", "telegram", "c") == {0: "501", 1: "502"}
    third.record_delivered("turn-cut")
    await third.checkpoint(no_sessions)
    await third.close()

    fourth = Journal(tmp_path)
    await fourth.open()
    assert fourth.opened_parts("turn-cut", "telegram", "c") == {}
    await fourth.close()


async def test_a_stream_whose_messages_another_turn_answered_is_forgotten(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    await journal.open()
    cut, durable = journal.accept(inbound("aborted after a restart", "1"))
    await durable
    journal.start_turn("turn-cut", [cut.id])
    await journal.record_opened("turn-cut", "telegram", "c", 0, "501")
    await journal.record_outcome(outcome([cut.id], None))  # an abort answered it
    assert journal.resumed_turn([cut.id]) is None
    assert journal.opened_parts("turn-cut", "telegram", "c") == {}
    await journal.close()


@st.composite
def journal_script(draw: st.DrawFn) -> list[tuple[str, int]]:
    steps: list[tuple[str, int]] = []
    accepted = 0
    for _ in range(draw(st.integers(1, 25))):
        action = draw(st.sampled_from(["accept", "answer", "deliver", "checkpoint"]))
        if action == "accept" or accepted == 0:
            accepted += 1
            steps.append(("accept", accepted))
        else:
            steps.append((action, draw(st.integers(1, accepted))))
    return steps


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(script=journal_script(), cut=st.integers(min_value=0))
def test_any_prefix_of_the_log_replays_to_a_consistent_state(
    tmp_path_factory: object, script: list[tuple[str, int]], cut: int
) -> None:
    directory = Path(str(tmp_path_factory.mktemp("journal")))  # type: ignore[attr-defined]

    async def scenario() -> None:
        journal = Journal(directory, fsync="never")
        await journal.open()
        id_of: dict[int, int] = {}
        turn_of: dict[int, str] = {}
        for action, number in script:
            if action == "accept":
                received, durable = journal.accept(inbound(f"m{number}", f"p{number}"))
                await durable
                id_of[number] = received.id
            elif action == "answer" and id_of[number] in journal.state.received:
                done = outcome([id_of[number]], f"r{number}")
                turn_of[number] = done.turn
                await journal.record_outcome(done)
            elif action == "deliver" and number in turn_of:
                journal.record_delivered(turn_of[number])
            elif action == "checkpoint":
                await journal.checkpoint(no_sessions)
        await journal.close()
        [segment] = sorted(directory.glob("*.wal"))  # noqa: ASYNC240 (a test, after close)
        data = segment.read_bytes()
        segment.write_bytes(data[: cut % (len(data) + 1)])

        again = Journal(directory, fsync="never")
        recovery = await again.open()
        pending = {r.id for r in recovery.pending}
        undelivered = {o.turn for o in recovery.undelivered}
        answered = {i for o in again.state.outcomes.values() for i in o.answers}
        # Nothing is both waiting and answered; every waiting message is deduplicated; every
        # undelivered reply belongs to an outcome the state holds.
        assert not pending & answered
        assert all(again.seen(r.message) == r.id for r in recovery.pending)
        assert undelivered <= set(again.state.outcomes)
        # The journal goes on from past every id it has seen.
        assert all(again.state.next_id > i for i in pending | answered)
        await again.close()

    asyncio.run(scenario())


def test_missing_suffix_finds_what_a_session_file_lacks() -> None:
    a, b, c = Message.user("a"), Message.assistant("b"), Message.user("c")
    assert missing_suffix([], [a, b]) == [a, b]
    assert missing_suffix([a], [a, b]) == [b]
    assert missing_suffix([a, b], [a, b]) == []
    assert missing_suffix([c, a, b], [a, b, c]) == [c]


async def test_restoring_sessions_twice_appends_nothing_the_second_time(tmp_path: Path) -> None:
    async with SessionStore(tmp_path, fsync="never") as store:
        sessions = SessionManager(store)
        key = SessionKey.parse("p:telegram:c")
        first = outcome([1], "one")
        second = outcome([2], "two")
        await sessions.append_all(key, first.messages)
        assert await restore_sessions(sessions, [first, second]) == 2
        assert await restore_sessions(sessions, [first, second]) == 0
        assert (await sessions.get(key)).messages == first.messages + second.messages


def owner_send(send_id: str, *, key: str | None = None, due: float | None = None) -> OwnerSend:
    return OwnerSend(
        send_id, "telegram", "c", f"text of {send_id}", 1000.0, due, key, True, "queued"
    )


async def test_the_owners_sends_and_their_standing_outlive_a_restart_and_a_checkpoint(
    tmp_path: Path,
) -> None:
    now = [1000.0]
    journal = Journal(tmp_path, clock=lambda: now[0])
    await journal.open()
    waiting = owner_send("waiting", key="k1", due=5000.0)
    waiting.status = "scheduled"
    sent = owner_send("sent", key="k2")
    for send in (waiting, sent):
        await journal.record_send(send)
    sent.turn = "turn-of-sent"
    journal.record_standing(sent)
    sent.status, sent.platform_ids, sent.ended_at = "sent", ["77"], 1001.0
    await journal.record_standing(sent)
    await journal.checkpoint(no_sessions)
    await journal.close()

    again = Journal(tmp_path, clock=lambda: now[0])
    await again.open()
    state = again.state
    assert state.send_keys == {"k1": "waiting", "k2": "sent"}
    assert [s.id for s in state.open_sends()] == ["waiting"]
    assert state.sends["waiting"].due == 5000.0
    assert (state.sends["sent"].status, state.sends["sent"].platform_ids) == ("sent", ["77"])
    assert state.send_of_turn == {"turn-of-sent": "sent"}

    # A day after it ended a sent message's status and key are let go; an open one stays.
    now[0] = 1001.0 + 24 * 3600
    await again.checkpoint(no_sessions)
    assert list(state.sends) == ["waiting"]
    assert state.send_keys == {"k1": "waiting"}
    assert state.send_of_turn == {}
    await again.close()
