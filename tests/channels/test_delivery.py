"""Delivery of whole replies: splitting, formatting and the one retry policy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from bus import (
    ANSWERS,
    REACTION,
    Attachment,
    Button,
    InboundMessage,
    OutboundMessage,
    StreamSnapshot,
    new_turn_id,
    reaction_note,
    turn_made_at,
)
from channels.base import FORMATTED
from channels.errors import (
    AuthError,
    DeliveryError,
    FormattingRejected,
    MessageNotModified,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.outbound.delivery import Chunk, chunk_message
from channels.retry import Backoff, Retrier, RetryPolicy, no_jitter
from channels.split.limits import PlatformLimit
from tests.channels.conftest import (
    ChannelFactory,
    FakeClock,
    ManagedFactory,
    ManagerFactory,
    sample,
)
from tests.channels.recording import RecordingChannel, WholeSendChannel

TEXT = (
    "The first sentence is here. A second one follows it.\n\n"
    "A new paragraph starts now, with several words in it."
)


def reply(content: str, **fields: object) -> OutboundMessage:
    return OutboundMessage(channel="rec", chat_id="c1", content=content, **fields)


def words(texts: list[str]) -> list[str]:
    return " ".join(texts).split()


async def test_splits_to_a_tiny_limit_in_order(managed: ManagedFactory) -> None:
    channel, manager = managed(limit=PlatformLimit(20, "chars"))

    await manager.deliver(reply(TEXT, reply_to="in-7"))

    sent = channel.of("send")
    assert len(sent) > 3
    assert all(len(call.content) <= 20 for call in sent)
    assert words([call.content for call in sent]) == TEXT.split()
    assert [call.message.reply_to for call in sent if call.message] == ["in-7"] + [None] * (
        len(sent) - 1
    )
    assert not any(call.formatted for call in sent)


def reaction_to(message_id: str) -> InboundMessage:
    return InboundMessage(
        channel="rec",
        sender_id="u1",
        chat_id="c1",
        content=reaction_note("👍", None),
        message_id=f"reaction-{message_id}",
        metadata={REACTION: {"emoji": "👍", "message_id": message_id}},
    )


async def test_a_reaction_quotes_the_part_of_the_reply_it_is_on(managed: ManagedFactory) -> None:
    channel, manager = managed(limit=PlatformLimit(30, "chars"), cls=WholeSendChannel)

    ids = await manager.deliver(reply(TEXT))

    parts = channel.delivered
    assert len(ids) == len(parts) > 1
    quoted = [manager.sent_texts.quoted(reaction_to(i)).content for i in ids]
    assert quoted == [f"[reaction 👍 to: {part}]" for part in parts]
    # A message this process did not send keeps the platform's own wording.
    unknown = manager.sent_texts.quoted(reaction_to("elsewhere"))
    assert unknown.content == "[reaction 👍 to a message]"


async def test_resplits_when_formatting_grows_the_text(managed: ManagedFactory) -> None:
    # Every "e" becomes three characters once formatted: raw chunks of 20 no longer fit.
    channel, manager = managed(
        limit=PlatformLimit(20, "chars"), formatter=lambda text: text.replace("e", "<e>")
    )

    await manager.deliver(reply(TEXT))

    sent = channel.of("send")
    assert all(len(call.content) <= 20 for call in sent)
    assert all(call.formatted for call in sent if "<e>" in call.content)
    assert words([call.content.replace("<e>", "e") for call in sent]) == TEXT.split()


async def test_a_reply_that_fits_once_rendered_is_one_message_and_so_is_its_stream(
    make_manager: ManagerFactory, make_channel: ChannelFactory
) -> None:
    # Markup the platform drops (Slack's `*bold*` for `**bold**`) can make the agent's text
    # longer than the limit while what the platform receives fits: one message, streamed or not.
    text = "**bold** words that fit"
    shrink = {"limit": PlatformLimit(20, "chars"), "formatter": lambda t: t.replace("**", "")}
    whole, streamed = make_channel(**shrink), make_channel(name="edits", editable=True, **shrink)
    manager = make_manager()
    manager.register(whole)
    manager.register(streamed)

    await manager.deliver(reply(text))
    snapshot = OutboundMessage(channel="edits", chat_id="c1", content=text, stream_id="s")
    await manager.deliver(StreamSnapshot(snapshot))
    await manager.deliver(snapshot)

    assert [call.content for call in whole.of("send")] == ["bold words that fit"]
    assert [call.content for call in streamed.of("send_with_id")] == ["bold words that fit"]
    assert streamed.of("send") == []


async def test_limit_is_measured_in_the_platforms_unit(managed: ManagedFactory) -> None:
    channel, manager = managed(limit=PlatformLimit(12, "utf16"))

    await manager.deliver(reply("😀😀😀😀 😀😀😀😀 😀😀😀😀"))

    assert [call.content for call in channel.of("send")] == ["😀😀😀😀", "😀😀😀😀", "😀😀😀😀"]


async def test_rate_limit_waits_exactly_retry_after_and_delivers_once(
    managed: ManagedFactory,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    channel, manager = managed()
    channel.fail("send", RateLimited(7.5))

    await manager.deliver(reply("hello"))

    assert clock.sleeps == [7.5]
    assert channel.delivered == ["hello"]
    assert len(channel.of("send", ok=False)) == 2
    assert sample(registry, "octos_send_retries_total", channel="rec", reason="rate_limited") == 1
    assert sample(registry, "octos_messages_out_total", channel="rec") == 1


async def test_a_reply_waits_a_rate_limit_s_whole_retry_after(
    managing: ManagerFactory, make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel()
    channel.fail("send", RateLimited(3_600))
    manager = managing(channel, retry_policy=RetryPolicy(max_retry_after_s=300))

    await manager.deliver(reply("hello"))

    assert clock.sleeps == [3_600], "asked again before the platform's pause was over"
    assert channel.delivered == ["hello"]


async def test_a_call_outside_a_reply_caps_the_rate_limit_wait(clock: FakeClock) -> None:
    retrier = Retrier(RetryPolicy(max_retry_after_s=300), sleep=clock.sleep, jitter=no_jitter)
    answers = iter([RateLimited(86_400), None])

    async def edit() -> str:
        if (error := next(answers)) is not None:
            raise error
        return "edited"

    assert await retrier.call(edit, channel="rec", chat_id="c1", action="edit") == "edited"
    assert clock.sleeps == [300]


@pytest.mark.parametrize(
    "error",
    [
        TransientError("502 bad gateway"),
        TimeoutError(),
        ConnectionResetError("reset by peer"),
        aiohttp.ServerDisconnectedError(),
    ],
    ids=["transient", "timeout", "oserror", "aiohttp"],
)
async def test_transient_errors_back_off_exponentially(
    managed: ManagedFactory, clock: FakeClock, error: Exception
) -> None:
    channel, manager = managed()
    channel.fail("send", error, error, error)

    await manager.deliver(reply("hello"))

    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert channel.delivered == ["hello"]


async def test_a_reply_is_retried_past_max_attempts_until_it_is_delivered(
    managing: ManagerFactory,
    make_channel: ChannelFactory,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    channel = make_channel()
    channel.fail("send", *[TransientError("down")] * 12)
    manager = managing(
        channel, retry_policy=RetryPolicy(max_attempts=5, backoff=Backoff(initial_s=1.0, max_s=5.0))
    )

    await manager.deliver(reply("hello"))

    assert clock.sleeps == [1.0, 2.0, 4.0] + [5.0] * 9
    assert channel.delivered == ["hello"]
    assert sample(registry, "octos_send_retries_total", channel="rec", reason="transient") == 12
    assert sample(registry, "octos_send_errors_total", channel="rec", reason="transient") == 0


class RefusingUntil(RecordingChannel):
    """Refuses connections until the (fake) clock reaches `outage_ends`."""

    outage_ends = 0.0

    def _refuse_in_the_outage(self) -> None:
        if self._clock() < self.outage_ends:
            raise ConnectionRefusedError("connection refused")

    async def send(self, message: OutboundMessage) -> None:
        self._refuse_in_the_outage()
        await super().send(message)

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        self._refuse_in_the_outage()
        return await super().send_with_id(message)


async def test_a_reply_due_through_a_two_minute_outage_is_sent_once_when_it_ends(
    managing: ManagerFactory, make_channel: ChannelFactory, clock: FakeClock
) -> None:
    """The platform refuses connections for 120 s of the clock; the default policy keeps
    trying (1 s doubling to 30 s) and the reply goes out at the first try after the outage."""
    channel = make_channel(cls=RefusingUntil)
    assert isinstance(channel, RefusingUntil)
    channel.outage_ends = clock.now + 120.0
    manager = managing(channel)

    await manager.deliver(reply("hello"))

    assert channel.delivered == ["hello"]
    assert clock.now - channel.outage_ends < 30.0, "waited past the backoff's cap after it"
    assert len(clock.sleeps) > 5, "the outage outlasted the old five tries"


async def test_a_reply_failing_past_its_deadline_expires_with_a_typed_error(
    managing: ManagerFactory,
    make_channel: ChannelFactory,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    channel = make_channel()
    channel.fail("send", *[TransientError("down")] * 1_000)
    manager = managing(
        channel,
        retry_policy=RetryPolicy(backoff=Backoff(initial_s=1.0, max_s=5.0)),
        delivery_deadline_s=60.0,
    )

    with pytest.raises(DeliveryError) as caught:
        await manager.deliver(reply("hello"))

    assert caught.value.reason == "expired"
    assert caught.value.channel == "rec"
    assert sum(clock.sleeps) <= 60.0
    assert sum(clock.sleeps) > 55.0, "gave up long before the deadline"
    assert channel.delivered == []
    assert sample(registry, "octos_send_errors_total", channel="rec", reason="expired") == 1


async def test_a_reply_s_deadline_counts_from_its_turn_not_from_now(
    managing: ManagerFactory, make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel()
    channel.fail("send", *[TransientError("down")] * 1_000)
    manager = managing(channel, delivery_deadline_s=3_600.0)
    turn = str(new_turn_id())
    made_at = turn_made_at(turn)
    assert made_at is not None
    clock.now = made_at + 3_600.0 - 10.0  # a restart 10 s before the deadline

    with pytest.raises(DeliveryError) as caught:
        await manager.deliver(reply("hello", delivery_id=turn))

    assert caught.value.reason == "expired"
    assert sum(clock.sleeps) <= 10.0


async def test_a_call_outside_a_reply_gives_up_after_max_attempts(clock: FakeClock) -> None:
    retrier = Retrier(
        RetryPolicy(max_attempts=5, backoff=Backoff(initial_s=1.0, max_s=5.0)),
        sleep=clock.sleep,
        jitter=no_jitter,
    )

    async def edit() -> None:
        raise TransientError("down")

    with pytest.raises(DeliveryError) as caught:
        await retrier.call(edit, channel="rec", chat_id="c1", action="edit")

    assert (caught.value.reason, caught.value.attempts) == ("transient", 5)
    assert clock.sleeps == [1.0, 2.0, 4.0, 5.0]


@pytest.mark.parametrize(
    ("error", "reason"),
    [(MessageTooLong("too long"), "too_long"), (AuthError("401"), "auth")],
)
async def test_refusals_are_never_retried(
    managed: ManagedFactory,
    clock: FakeClock,
    registry: CollectorRegistry,
    error: Exception,
    reason: str,
) -> None:
    channel, manager = managed()
    channel.fail("send", error)

    with pytest.raises(DeliveryError) as caught:
        await manager.deliver(reply("hello"))

    assert caught.value.reason == reason
    assert caught.value.attempts == 1
    assert clock.sleeps == []
    assert len(channel.of("send", ok=False)) == 1
    assert sample(registry, "octos_send_errors_total", channel="rec", reason=reason) == 1


async def test_unexpected_errors_give_up_as_unknown(managed: ManagedFactory) -> None:
    channel, manager = managed()
    channel.fail("send", ValueError("a bug in the channel"))

    with pytest.raises(DeliveryError) as caught:
        await manager.deliver(reply("hello"))

    assert caught.value.reason == "unknown"
    assert isinstance(caught.value.__cause__, ValueError)


async def test_formatting_rejection_is_resent_as_plain_text(managed: ManagedFactory) -> None:
    channel, manager = managed(
        formatter=lambda text: text.replace("**", "<b>", 1).replace("**", "</b>", 1)
    )
    channel.fail("send", FormattingRejected("can't parse entities"))

    await manager.deliver(reply("a **bold** word", reply_to="in-1"))

    rejected, accepted = channel.of("send", ok=False)
    assert rejected.content == "a <b>bold</b> word"
    assert rejected.formatted
    assert accepted.content == "a **bold** word"
    assert accepted.ok
    assert not accepted.formatted
    assert accepted.message is not None
    assert accepted.message.reply_to == "in-1"


async def test_formatting_rejection_of_plain_text_gives_up(managed: ManagedFactory) -> None:
    channel, manager = managed()
    channel.fail("send", FormattingRejected("can't parse entities"))

    with pytest.raises(DeliveryError) as caught:
        await manager.deliver(reply("plain"))

    assert caught.value.reason == "formatting"
    assert len(channel.of("send", ok=False)) == 1


async def test_not_modified_counts_as_success(
    managed: ManagedFactory,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    channel, manager = managed(editable=True, edit_interval_s=1.0)
    channel.fail("edit", MessageNotModified("message is not modified"))

    await manager.deliver(StreamSnapshot(reply("one", stream_id="s")))
    clock.advance(1.0)
    await manager.deliver(StreamSnapshot(reply("one two", stream_id="s")))
    await manager.deliver(reply("one two", stream_id="s"))

    # One edit, refused as "not modified": taken as shown, so the equal final needs no call.
    assert [call.kind for call in channel.calls] == ["send_with_id", "edit"]
    assert clock.sleeps == []
    assert sample(registry, "octos_send_errors_total", channel="rec", reason="unknown") == 0
    assert len(manager.streams) == 0


async def test_first_failure_stops_the_remaining_chunks(
    managed: ManagedFactory, registry: CollectorRegistry
) -> None:
    channel, manager = managed(limit=PlatformLimit(20, "chars"))
    channel.fail("send", None, MessageTooLong("no"))

    with pytest.raises(DeliveryError):
        await manager.deliver(reply(TEXT))

    assert len(channel.of("send", ok=False)) == 2
    assert len(channel.delivered) == 1
    assert sample(registry, "octos_send_errors_total", channel="rec", reason="too_long") == 1


async def test_media_is_sent_whole(managed: ManagedFactory) -> None:
    channel, manager = managed(limit=PlatformLimit(10, "chars"))

    await manager.deliver(reply("a caption longer than ten", media=["/tmp/photo.png"]))

    assert channel.delivered == ["a caption longer than ten"]


async def test_a_file_this_process_does_not_have_is_replaced_by_a_notice(
    managed: ManagedFactory, tmp_path: Path
) -> None:
    channel, manager = managed()
    here = tmp_path / "here.txt"
    here.write_text("kept here")
    files = [
        Attachment(
            kind="file", mime="text/plain", name=path.name, size=9, sha256="0", path=str(path)
        )
        for path in (tmp_path / "elsewhere.txt", here)
    ]

    with capture_logs() as logs:
        await manager.deliver(reply("two files", delivery_id="turn-3", attachments=files))

    notice, link = channel.delivered[1:]
    assert notice == "Sorry, I could not send elsewhere.txt: the file is not on this gateway."
    assert "here.txt" in link  # the channel's own way to send a file: its name as text
    [missing] = [entry for entry in logs if entry["event"] == "delivery.attachment_missing"]
    assert (missing["chat_id"], missing["file"]) == ("c1", "elsewhere.txt")


async def test_an_empty_reply_reaches_the_channel_as_is_and_blanks_are_skipped(
    managed: ManagedFactory,
) -> None:
    channel, manager = managed()

    # An empty reply is still the answer a waiting request (the HTTP API) needs.
    await manager.deliver(reply("", metadata={ANSWERS: ["in-1"]}))
    await manager.deliver(reply("   "))

    sent = channel.of("send")
    assert len(sent) == 1
    assert sent[0].message is not None
    assert sent[0].message.content == ""
    assert sent[0].message.metadata == {ANSWERS: ["in-1"]}


async def test_formatted_flag_is_set_only_when_formatting_changed_the_text(
    managed: ManagedFactory,
) -> None:
    channel, manager = managed(formatter=str.upper)

    await manager.deliver(reply("shout"))
    await manager.deliver(reply("QUIET", metadata={FORMATTED: True}))

    first, second = channel.of("send")
    assert first.formatted
    assert first.content == "SHOUT"
    assert not second.formatted


async def test_unknown_channel_is_a_typed_error(
    make_manager: ManagerFactory, make_channel: ChannelFactory, registry: CollectorRegistry
) -> None:
    manager = make_manager()

    with pytest.raises(DeliveryError) as caught:
        await manager.deliver(OutboundMessage(channel="nowhere", chat_id="c", content="x"))

    assert caught.value.reason == "no_channel"
    assert sample(registry, "octos_send_errors_total", channel="nowhere", reason="no_channel") == 1


async def test_cancellation_during_a_backoff_propagates(
    managing: ManagerFactory, make_channel: ChannelFactory
) -> None:
    backing_off = asyncio.Event()

    async def endless_sleep(seconds: float) -> None:
        backing_off.set()
        await asyncio.Event().wait()

    channel = make_channel()
    channel.fail("send", TransientError("down"))
    manager = managing(channel, sleep=endless_sleep)

    task = asyncio.create_task(manager.deliver(reply("hello")))
    await asyncio.wait_for(backing_off.wait(), timeout=5)
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(channel.of("send", ok=False)) == 1
    assert channel.delivered == []


async def test_a_whole_reply_reports_the_platform_ids_of_its_messages(
    managed: ManagedFactory,
) -> None:
    channel, manager = managed(limit=PlatformLimit(60, "chars"), cls=WholeSendChannel)

    ids = await manager.deliver(reply(TEXT, reply_to="in-7"))

    sent = channel.of("send_with_id")
    assert len(sent) == 2
    assert channel.of("send") == []
    assert ids == [call.message_id for call in sent] == ["m1", "m2"]
    assert words([call.content for call in sent]) == TEXT.split()
    assert [call.message.reply_to for call in sent if call.message] == ["in-7", None]


async def test_a_channel_whose_send_with_id_opens_a_stream_is_sent_whole_without_ids(
    managed: ManagedFactory,
) -> None:
    # send_with_id_sends_whole False
    channel, manager = managed(limit=PlatformLimit(60, "chars"))

    assert await manager.deliver(reply(TEXT)) == []
    assert len(channel.of("send")) == 2
    assert channel.of("send_with_id") == []


def test_a_chunk_is_its_reply_with_the_chunk_text_and_its_own_part() -> None:
    reply = OutboundMessage(
        channel="telegram",
        chat_id="42",
        content="*whole* reply",
        reply_to="7",
        media=["/tmp/a.png"],
        metadata={ANSWERS: ["7"], FORMATTED: True},
        stream_id="turn-1",
        delivery_id="turn-1",
    )
    formatted = chunk_message(reply, Chunk("*part*", "<b>part</b>"), reply_to=None, part=2)
    assert formatted == reply.model_copy(
        update={
            "content": "<b>part</b>",
            "reply_to": None,
            "metadata": {ANSWERS: ["7"], FORMATTED: True},
            "delivery_id": "turn-1.2",
        }
    )
    plain = chunk_message(reply, Chunk("part", "part"), reply_to="7")
    assert (plain.content, plain.reply_to, plain.metadata, plain.delivery_id) == (
        "part",
        "7",
        {ANSWERS: ["7"]},  # not formatted: the flag the reply carried is not the chunk's
        "turn-1.0",
    )
    unnumbered = reply.model_copy(update={"delivery_id": None})
    assert chunk_message(unnumbered, Chunk("p", "p"), reply_to=None).delivery_id is None


async def test_a_split_reply_carries_its_buttons_on_its_last_part_only(
    managed: ManagedFactory,
) -> None:
    channel, manager = managed(limit=PlatformLimit(20, "chars"))
    buttons = [[Button(text="Approve", data="refund:42:yes")]]

    await manager.deliver(reply(TEXT, buttons=buttons))

    sent = [call.message for call in channel.of("send") if call.message]
    assert len(sent) > 3
    assert [message.buttons for message in sent] == [[]] * (len(sent) - 1) + [buttons]
