"""Stream editing: one message edited as the reply grows, within the platform's edit rate."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from prometheus_client import CollectorRegistry

from bus import OutboundEvent, OutboundMessage, StreamSnapshot
from channels.errors import DeliveryError, RateLimited
from channels.outbound.manager import ChannelManager
from channels.split.limits import PlatformLimit
from tests.channels.conftest import (
    ChannelFactory,
    FakeClock,
    Managed,
    ManagedFactory,
    ManagerFactory,
    sample,
)
from tests.channels.recording import FinishingChannel, RecordingChannel, WholeSendChannel

SENTENCES = [f"Sentence number {n} of the streamed reply." for n in range(1, 13)]


def snapshot(
    content: str, *, final: bool = False, stream_id: str = "s1", reply_to: str | None = None
) -> OutboundEvent:
    """A snapshot of stream `stream_id`, or (`final`) the streamed reply's final text."""
    reply = OutboundMessage(
        channel="rec", chat_id="c1", content=content, stream_id=stream_id, reply_to=reply_to
    )
    return reply if final else StreamSnapshot(reply)


def growing(text: str, step: int) -> list[str]:
    """The snapshots an agent streams: every `step` characters, the whole text so far."""
    return [text[:end] for end in range(step, len(text), step)]


async def stream(manager: ChannelManager, clock: FakeClock, text: str, *, step: int) -> None:
    """The agent streams `text`, `step` characters more each second, then its final snapshot."""
    for content in growing(text, step):
        await manager.deliver(snapshot(content))
        clock.advance(1.0)
    await manager.deliver(snapshot(text, final=True))


def edit_times(channel: RecordingChannel) -> list[float]:
    return [call.at for call in channel.of("send_with_id", "edit", "finish")]


def shown_messages(channel: RecordingChannel) -> dict[str, str]:
    """What each message shows in the end: its first text, then its latest edit."""
    shown: dict[str, str] = {}
    counter = 0
    for call in channel.of("send_with_id", "send", "edit", "finish"):
        if call.kind in ("edit", "finish"):
            assert call.message_id in shown, "an edit of a message never sent"
            shown[call.message_id or ""] = call.content
        else:
            counter += 1
            shown[call.message_id or f"plain-{counter}"] = call.content
    return shown


@pytest.fixture
def edited_every_second(managed: ManagedFactory) -> Managed:
    """The set-up of most tests here: a channel that edits, at most once a second (so the fake
    clock's steps decide which snapshot is shown), and the manager it is registered with."""
    return managed(editable=True, edit_interval_s=1.0)


async def test_edits_never_exceed_one_per_interval(
    edited_every_second: Managed,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    channel, manager = edited_every_second
    text = " ".join(SENTENCES[:4])

    for content in growing(text, 5):
        await manager.deliver(snapshot(content))
        clock.advance(0.15)
        await manager.streams.flush_due()
    await manager.deliver(snapshot(text, final=True))

    times = edit_times(channel)
    assert len(times) > 4
    assert all(later - earlier >= 1.0 for earlier, later in itertools.pairwise(times))
    assert len(channel.of("send_with_id")) == 1
    assert list(shown_messages(channel).values()) == [text]
    assert sample(registry, "octos_stream_edits_total", channel="rec") == len(times) - 1
    assert len(manager.streams) == 0


async def test_snapshots_within_the_interval_are_coalesced_to_the_newest(
    edited_every_second: Managed, clock: FakeClock
) -> None:
    channel, manager = edited_every_second

    await manager.deliver(snapshot("a"))
    for content in ("a b", "a b c", "a b c d"):
        clock.advance(0.2)
        await manager.deliver(snapshot(content))
    assert manager.streams.next_flush_delay_s() == pytest.approx(0.4)
    await manager.streams.flush_due()
    assert [call.content for call in channel.calls] == ["a"]

    clock.advance(0.4)
    await manager.streams.flush_due()

    assert [(call.kind, call.content) for call in channel.calls] == [
        ("send_with_id", "a"),
        ("edit", "a b c d"),
    ]
    assert manager.streams.next_flush_delay_s() is None


async def test_identical_edits_are_skipped(edited_every_second: Managed, clock: FakeClock) -> None:
    channel, manager = edited_every_second

    for content in ("same", "same", "same more", "same more"):
        await manager.deliver(snapshot(content))
        clock.advance(2)
    await manager.deliver(snapshot("same more", final=True))

    assert [(call.kind, call.content) for call in channel.calls] == [
        ("send_with_id", "same"),
        ("edit", "same more"),
    ]


async def test_final_equal_to_what_is_shown_makes_no_call(
    edited_every_second: Managed, clock: FakeClock
) -> None:
    channel, manager = edited_every_second

    await manager.deliver(snapshot("all of it"))
    clock.advance(5)
    await manager.deliver(snapshot("all of it", final=True))

    assert [(call.kind, call.content) for call in channel.calls] == [("send_with_id", "all of it")]


async def test_a_platform_that_needs_the_finish_hears_it_once(
    managed: ManagedFactory, clock: FakeClock
) -> None:
    channel, manager = managed(cls=FinishingChannel, editable=True, edit_interval_s=1.0)

    await manager.deliver(snapshot("all"))
    clock.advance(5)
    await manager.deliver(snapshot("all of it", final=True))
    await manager.deliver(snapshot("all of it", final=True, stream_id="s2"))

    assert [(call.kind, call.content) for call in channel.calls] == [
        ("send_with_id", "all"),
        ("finish", "all of it"),
        # A stream whose first message is its final is an ordinary reply.
        ("send", "all of it"),
    ]


@pytest.mark.parametrize(
    ("rate_limited", "sleeps", "final_after_s"),
    [(True, [pytest.approx(0.75)], 1.0), (False, [], 0.25)],
    ids=["a platform's final waits for its edit slot", "a local edit's final takes none"],
)
async def test_final_waits_for_its_edit_slot_where_edits_are_rate_limited(
    edited_every_second: Managed,
    clock: FakeClock,
    rate_limited: bool,
    sleeps: list[float],
    final_after_s: float,
) -> None:
    channel, manager = edited_every_second
    channel.edits_rate_limited = rate_limited  # type: ignore[misc]

    await manager.deliver(snapshot("one"))
    clock.advance(0.25)
    await manager.deliver(snapshot("one two", final=True))

    assert clock.sleeps == sleeps
    first, final = channel.calls
    assert final.kind == "edit"
    assert final.content == "one two"
    assert final.at - first.at == pytest.approx(final_after_s)


async def test_rolls_over_to_a_new_message_before_the_limit(
    managed: ManagedFactory, clock: FakeClock
) -> None:
    channel, manager = managed(
        editable=True, edit_interval_s=1.0, limit=PlatformLimit(100, "chars")
    )
    text = " ".join(SENTENCES)

    await stream(manager, clock, text, step=17)

    shown = list(shown_messages(channel).values())
    assert len(shown) >= 5
    assert all(len(message) <= 100 for message in shown)
    assert all(len(call.content) <= 100 for call in channel.calls)
    assert " ".join(shown).split() == text.split()
    # Every message but the last ends at a sentence: the splitter's natural break.
    assert all(message.endswith(".") for message in shown)
    times = edit_times(channel)
    assert all(b - a >= 0 for a, b in itertools.pairwise(times))


async def test_rollover_is_measured_after_formatting(
    managed: ManagedFactory, clock: FakeClock
) -> None:
    channel, manager = managed(
        editable=True,
        edit_interval_s=1.0,
        limit=PlatformLimit(60, "chars"),
        formatter=lambda text: text.replace("e", "<e>"),
    )
    text = " ".join(SENTENCES[:6])

    await stream(manager, clock, text, step=11)

    assert all(len(call.content) <= 60 for call in channel.calls)
    shown = [message.replace("<e>", "e") for message in shown_messages(channel).values()]
    assert " ".join(shown).split() == text.split()


async def test_a_code_fence_continues_in_the_next_message(
    managed: ManagedFactory, clock: FakeClock
) -> None:
    channel, manager = managed(editable=True, edit_interval_s=1.0, limit=PlatformLimit(80, "chars"))
    code = "\n".join(f"value_{n} = compute({n})" for n in range(12))
    text = f"Here is the code:\n\n```python\n{code}\n```"

    await stream(manager, clock, text, step=23)

    shown = list(shown_messages(channel).values())
    assert len(shown) >= 3
    assert all(len(message) <= 80 for message in shown)
    for message in shown[1:]:
        assert message.startswith("```python\n")
    lines = [line for message in shown for line in message.splitlines()]
    assert [line for line in lines if line.startswith("value_")] == code.splitlines()


async def test_a_channel_that_cannot_edit_gets_only_the_final(
    managed: ManagedFactory, clock: FakeClock
) -> None:
    channel, manager = managed(limit=PlatformLimit(100, "chars"))
    text = " ".join(SENTENCES[:5])

    await stream(manager, clock, text, step=20)

    sent = channel.of("send")
    assert len(sent) == len(channel.calls) >= 2
    assert " ".join(call.content for call in sent).split() == text.split()
    assert len(manager.streams) == 0


async def test_without_a_message_id_only_the_final_follows(
    managed: ManagedFactory, clock: FakeClock
) -> None:
    channel, manager = managed(editable=True, returns_ids=False)

    await manager.deliver(snapshot("partial"))
    for content in ("partial text", "partial text grows"):
        clock.advance(5)
        await manager.deliver(snapshot(content))
    await manager.deliver(snapshot("partial text grows, done", final=True))

    assert [(call.kind, call.content) for call in channel.calls] == [
        ("send_with_id", "partial"),
        ("send", "partial text grows, done"),
    ]


async def test_first_message_keeps_reply_to(managed: ManagedFactory, clock: FakeClock) -> None:
    channel, manager = managed(editable=True, limit=PlatformLimit(60, "chars"))
    text = " ".join(SENTENCES[:4])

    for content in growing(text, 30):
        await manager.deliver(snapshot(content, reply_to="in-9"))
        clock.advance(2)
    await manager.deliver(snapshot(text, final=True, reply_to="in-9"))

    sent = [call.message for call in channel.of("send_with_id", "send") if call.message]
    assert len(sent) >= 2
    assert [message.reply_to for message in sent] == ["in-9"] + [None] * (len(sent) - 1)


async def test_a_rate_limited_edit_waits_and_edits(
    edited_every_second: Managed, clock: FakeClock
) -> None:
    channel, manager = edited_every_second
    channel.fail("edit", RateLimited(3.0))

    await manager.deliver(snapshot("one"))
    clock.advance(1.0)
    await manager.deliver(snapshot("one two"))

    assert clock.sleeps == [3.0]
    assert [call.content for call in channel.of("edit")] == ["one two"]


async def test_a_failed_final_edit_sends_the_text_anew(
    edited_every_second: Managed,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    channel, manager = edited_every_second
    channel.fail("edit", ValueError("message to edit not found"))

    await manager.deliver(snapshot("one"))
    clock.advance(1.0)
    await manager.deliver(snapshot("one two", final=True))

    assert channel.delivered == ["one", "one two"]


async def test_a_failed_snapshot_edit_is_reported_and_the_stream_goes_on(
    edited_every_second: Managed,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    channel, manager = edited_every_second
    channel.fail("edit", ValueError("boom"))

    await manager.deliver(snapshot("one"))
    clock.advance(1.0)
    with pytest.raises(DeliveryError):
        await manager.deliver(snapshot("one two"))
    clock.advance(1.0)
    await manager.deliver(snapshot("one two three", final=True))

    assert [call.content for call in channel.of("edit")] == ["one two three"]
    assert sample(registry, "octos_send_errors_total", channel="rec", reason="unknown") == 1


async def test_abandoned_streams_expire(
    managing: ManagerFactory, make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel(editable=True)
    manager = managing(channel, stream_ttl_s=60.0)

    await manager.deliver(snapshot("never finished", stream_id="old"))
    clock.advance(61)
    await manager.deliver(snapshot("fresh", stream_id="new"))

    assert len(manager.streams) == 1
    await manager.deliver(snapshot("fresh and done", stream_id="new", final=True))
    assert len(manager.streams) == 0


async def test_the_flusher_shows_a_coalesced_snapshot_when_it_falls_due(
    edited_every_second: Managed, clock: FakeClock
) -> None:
    channel, manager = edited_every_second
    await manager.deliver(snapshot("one"))
    clock.advance(0.3)
    await manager.deliver(snapshot("one two"))

    async with asyncio.TaskGroup() as group:
        flusher = group.create_task(manager.streams.run_flusher(), name="flusher-under-test")
        await channel.wait_for(lambda: bool(channel.of("edit")))
        flusher.cancel()

    (edit,) = channel.of("edit")
    assert edit.content == "one two"
    assert edit.at - channel.calls[0].at == pytest.approx(1.0)
    assert clock.sleeps == [pytest.approx(0.7)]


async def test_the_final_reports_the_platform_ids_of_every_message_the_stream_made(
    managed: ManagedFactory, clock: FakeClock
) -> None:
    # Its ids name platform messages (the recording channel's own default says they do not).
    channel, manager = managed(
        editable=True,
        edit_interval_s=1.0,
        limit=PlatformLimit(100, "chars"),
        cls=WholeSendChannel,
    )
    text = " ".join(SENTENCES)
    for content in growing(text, 17):
        await manager.deliver(snapshot(content))
        clock.advance(1.0)

    ids = await manager.deliver(snapshot(text, final=True))

    opened = [call.message_id for call in channel.of("send_with_id")]
    assert len(opened) >= 5  # rolled over: several messages, each reported once
    assert ids == opened


async def test_a_snapshot_arriving_after_its_final_opens_no_second_message(
    edited_every_second: Managed, clock: FakeClock
) -> None:
    channel, manager = edited_every_second
    await manager.deliver(snapshot("the reply"))
    clock.advance(1.0)
    await manager.deliver(snapshot("the reply, whole", final=True))

    # Late (another process's lane, a turn run twice): dropped, the message stays finished.
    await manager.deliver(snapshot("the reply"))
    clock.advance(1.0)
    await manager.streams.flush_due()

    assert list(shown_messages(channel).values()) == ["the reply, whole"]
    assert len(channel.of("send_with_id")) == 1
    # Another stream in the same chat is shown as usual.
    await manager.deliver(snapshot("the next reply", stream_id="s2"))
    assert len(channel.of("send_with_id")) == 2
