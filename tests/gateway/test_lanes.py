"""Per-chat lanes: order, queue modes, abort, backlog counts, what abort and interrupt drop."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from bus import InboundMessage
from gateway.turn.journal import OwnerSend, Received
from gateway.turn.lanes import (
    CommandItem,
    Commit,
    LaneItem,
    Lanes,
    QueueMode,
    SendItem,
    TurnItem,
    collected_content,
)

_ids = itertools.count(1)


def message(text: str) -> Received:
    inbound = InboundMessage(
        channel="test", sender_id="u", chat_id="c", content=text, message_id=text
    )
    return Received(next(_ids), inbound, 0.0)


def turn(text: str) -> TurnItem:
    return TurnItem((message(text),))


def owner_send(text: str) -> SendItem:
    return SendItem(OwnerSend(text, "test", "c", text, 0.0, None, None, True, "queued"))


def texts(items: list[LaneItem]) -> list[str]:
    return [
        r.message.content
        for item in items
        if not isinstance(item, SendItem)
        for r in (item.received if isinstance(item, TurnItem) else (item.received,))
    ]


class Recorder:
    """Runs lane items; the first one blocks until released, so others queue behind it."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.first_started = asyncio.Event()
        self.release_first = asyncio.Event()
        self.idle = asyncio.Event()

    async def __call__(self, item: LaneItem) -> None:
        if isinstance(item, SendItem):
            text = f"send:{item.send.text}"
        elif isinstance(item, TurnItem):
            text = item.content()
        else:
            text = f"cmd:{item.received.message.content}"
        self.started.append(text)
        if len(self.started) == 1:
            self.first_started.set()
            await self.release_first.wait()
        self.finished.append(text)


async def run_lanes(mode: QueueMode, script: object, dropped: list[str] | None = None) -> Recorder:
    recorder = Recorder()
    sink = dropped if dropped is not None else []
    async with asyncio.TaskGroup() as tasks:
        lanes = Lanes(mode, recorder, tasks, lambda items: sink.extend(texts(items)))
        await script(lanes, recorder)  # type: ignore[operator]
        await asyncio.wait_for(lanes.wait_idle(), 5)
        assert len(lanes) == 0
    return recorder


@pytest.mark.parametrize("text", ["hello", "", "two\n---\nlines"])
def test_a_turn_of_one_message_has_what_collecting_it_gives(text: str) -> None:
    # TurnItem.content skips the join for one message: the same text as collecting it.
    assert turn(text).content() == collected_content([text]) == text


@pytest.mark.parametrize(
    ("mode", "finished"),
    [
        ("collect", ["first", "second\n---\nQueued #2: third"]),
        ("followup", ["first", "second", "third"]),
    ],
    ids=["collect joins messages that waited", "followup answers one by one in order"],
)
async def test_messages_that_waited_for_a_turn(mode: QueueMode, finished: list[str]) -> None:
    async def script(lanes: Lanes, recorder: Recorder) -> None:
        lanes.submit("c", turn("first"))
        await recorder.first_started.wait()
        lanes.submit("c", turn("second"))
        lanes.submit("c", turn("third"))
        recorder.release_first.set()

    recorder = await run_lanes(mode, script)
    assert recorder.finished == finished


async def test_interrupt_cancels_the_running_turn_and_keeps_the_newest() -> None:
    async def script(lanes: Lanes, recorder: Recorder) -> None:
        lanes.submit("c", turn("first"))
        await recorder.first_started.wait()
        lanes.submit("c", turn("second"))
        lanes.submit("c", turn("third"))

    dropped: list[str] = []
    recorder = await run_lanes("interrupt", script, dropped)
    assert recorder.started == ["first", "third"]
    assert recorder.finished == ["third"]
    assert dropped == ["first", "second"]


async def test_commands_break_a_collected_batch_and_keep_their_place() -> None:
    async def script(lanes: Lanes, recorder: Recorder) -> None:
        lanes.submit("c", turn("first"))
        await recorder.first_started.wait()
        lanes.submit("c", turn("a"))
        lanes.submit("c", CommandItem(message("/new x")))
        lanes.submit("c", turn("b"))
        recorder.release_first.set()

    recorder = await run_lanes("collect", script)
    assert recorder.finished == ["first", "a", "cmd:/new x", "b"]


async def test_abort_cancels_running_and_drops_waiting() -> None:
    async def script(lanes: Lanes, recorder: Recorder) -> None:
        lanes.submit("c", turn("first"))
        await recorder.first_started.wait()
        lanes.submit("c", turn("second"))
        assert lanes.busy("c")
        assert lanes.backlog("c") == 2
        assert lanes.abort("c") is True
        assert lanes.abort("elsewhere") is False

    dropped: list[str] = []
    recorder = await run_lanes("followup", script, dropped)
    assert recorder.started == ["first"]
    assert recorder.finished == []
    assert dropped == ["first", "second"]


@pytest.mark.parametrize("mode", ["collect", "followup", "interrupt"])
async def test_an_owners_send_waits_its_turn_and_a_stop_does_not_drop_it(mode: QueueMode) -> None:
    async def script(lanes: Lanes, recorder: Recorder) -> None:
        lanes.submit("c", turn("first"))
        await recorder.first_started.wait()
        lanes.submit("c", owner_send("reminder"))
        lanes.submit("c", turn("second"))
        lanes.abort("c")

    dropped: list[str] = []
    recorder = await run_lanes(mode, script, dropped)
    assert recorder.finished == ["send:reminder"]
    assert dropped == ["first", "second"]


async def test_an_owners_send_keeps_its_place_between_turns() -> None:
    async def script(lanes: Lanes, recorder: Recorder) -> None:
        lanes.submit("c", turn("first"))
        await recorder.first_started.wait()
        lanes.submit("c", turn("a"))
        lanes.submit("c", owner_send("reminder"))
        lanes.submit("c", turn("b"))
        assert lanes.backlog("c") == 3
        recorder.release_first.set()

    recorder = await run_lanes("collect", script)
    assert recorder.finished == ["first", "a", "send:reminder", "b"]


async def test_chats_run_independently() -> None:
    async def script(lanes: Lanes, recorder: Recorder) -> None:
        lanes.submit("slow", turn("first"))
        await recorder.first_started.wait()
        lanes.submit("fast", turn("other chat"))
        await asyncio.wait_for(lanes.wait_idle_of("fast"), 5)
        assert recorder.finished == ["other chat"]
        recorder.release_first.set()

    recorder = await run_lanes("followup", script)
    assert recorder.finished == ["other chat", "first"]


async def test_backlog_counts_every_waiting_and_running_message() -> None:
    async def script(lanes: Lanes, recorder: Recorder) -> None:
        lanes.submit("c", turn("first"))
        await recorder.first_started.wait()
        for index in range(40):
            lanes.submit("c", turn(f"m{index}"))
        assert lanes.backlog("c") == 41
        assert lanes.backlog("other") == 0
        recorder.release_first.set()

    recorder = await run_lanes("followup", script)
    assert len(recorder.finished) == 41


async def test_a_failing_item_does_not_stop_the_lane() -> None:
    done: list[str] = []

    async def run_item(item: LaneItem) -> None:
        assert isinstance(item, TurnItem)
        if item.content() == "boom":
            raise RuntimeError("boom")
        done.append(item.content())

    async with asyncio.TaskGroup() as tasks:
        lanes = Lanes("followup", run_item, tasks, lambda _items: None)
        lanes.submit("c", turn("boom"))
        lanes.submit("c", turn("after"))
        await asyncio.wait_for(lanes.wait_idle(), 5)
    assert done == ["after"]


@pytest.mark.parametrize("mode", ["collect", "followup", "interrupt"])
async def test_every_mode_drains_to_idle(mode: QueueMode) -> None:
    async def script(lanes: Lanes, recorder: Recorder) -> None:
        recorder.release_first.set()
        for number in range(5):
            lanes.submit(f"chat{number}", turn(f"m{number}"))

    recorder = await run_lanes(mode, script)
    assert sorted(recorder.finished) == [f"m{n}" for n in range(5)]


async def test_an_abort_cancels_the_work_but_never_a_commit_under_way() -> None:
    committing = asyncio.Event()
    working = asyncio.Event()
    release_commit = asyncio.Event()
    committed: list[str] = []
    dropped: list[str] = []

    async def run_item(item: LaneItem) -> Commit:
        assert isinstance(item, TurnItem)
        text = item.content()
        if text == "aborted":
            working.set()
            await asyncio.Event().wait()  # the work never ends by itself

        async def commit() -> None:
            if text == "first":
                committing.set()
                await release_commit.wait()
            committed.append(text)

        return commit

    async with asyncio.TaskGroup() as tasks:
        lanes = Lanes("followup", run_item, tasks, lambda items: dropped.extend(texts(items)))
        lanes.submit("c", turn("first"))
        await committing.wait()
        assert lanes.abort("c") is False  # past its work: the reply goes out
        release_commit.set()
        await asyncio.wait_for(lanes.wait_idle(), 5)
        lanes.submit("c", turn("aborted"))
        lanes.submit("c", turn("after"))
        await working.wait()
        assert lanes.backlog("c") == 2
        assert lanes.abort("c") is True
        lanes.submit("c", turn("later"))
        await asyncio.wait_for(lanes.wait_idle(), 5)
    assert committed == ["first", "later"]
    assert dropped == ["aborted", "after"]
