"""A streamed reply resumed after a crash: finished in the messages its earlier run made."""

from __future__ import annotations

from dataclasses import dataclass, field

from bus import OutboundEvent, OutboundMessage, StreamSnapshot
from channels.outbound.manager import ChannelManager
from channels.outbound.streaming import WITHDRAWN_TEXT, StreamKey
from channels.split.limits import PlatformLimit
from tests.channels.conftest import ChannelFactory, FakeClock, ManagerFactory
from tests.channels.recording import DeletingChannel, RecordingChannel, WholeSendChannel

SENTENCES = [f"Sentence number {n} of the streamed reply." for n in range(1, 13)]


@dataclass
class KeptStreams:
    """The journal's part, in memory: what each stream made, by part; kept across managers."""

    parts: dict[StreamKey, dict[int, str]] = field(default_factory=dict)

    async def opened(self, key: StreamKey, part: int, platform_id: str) -> None:
        self.parts.setdefault(key, {})[part] = platform_id

    def recorded(self, key: StreamKey) -> dict[int, str]:
        return dict(self.parts.get(key, {}))


def reply(content: str, *, final: bool = False) -> OutboundEvent:
    message = OutboundMessage(channel="rec", chat_id="c1", content=content, stream_id="turn-1")
    return message if final else StreamSnapshot(message)


def shown(channel: RecordingChannel) -> dict[str, str]:
    """What each message the channel still has shows: its first text, then its latest edit."""
    texts: dict[str, str] = {}
    for call in channel.of("send_with_id", "send", "edit", "finish", "delete"):
        assert call.message_id is not None
        if call.kind == "delete":
            del texts[call.message_id]
        elif call.kind in ("edit", "finish"):
            assert call.message_id in texts, "an edit of a message never sent"
            texts[call.message_id] = call.content
        else:
            texts[call.message_id] = call.content
    return texts


def restarted(
    managing: ManagerFactory, channel: RecordingChannel, kept: KeptStreams
) -> ChannelManager:
    """A manager as a restarted daemon makes it: nothing in memory, the same record."""
    return managing(channel, stream_record=kept)


async def test_a_resumed_stream_edits_the_message_its_earlier_run_opened(
    managing: ManagerFactory, make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel(editable=True, edit_interval_s=1.0, cls=WholeSendChannel)
    kept = KeptStreams()
    await restarted(managing, channel, kept).deliver(reply("The reply"))
    clock.advance(1.0)

    manager = restarted(managing, channel, kept)
    await manager.deliver(reply("The"))
    clock.advance(1.0)
    await manager.deliver(reply("The reply, whole", final=True))

    assert shown(channel) == {"m1": "The reply, whole"}
    assert kept.parts == {("rec", "c1", "turn-1"): {0: "m1"}}


async def test_a_resumed_final_fills_the_earlier_parts_and_deletes_the_ones_left_over(
    managing: ManagerFactory, make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel(
        editable=True, edit_interval_s=1.0, limit=PlatformLimit(100, "chars"), cls=DeletingChannel
    )
    kept = KeptStreams()
    long_text = " ".join(SENTENCES)
    first = restarted(managing, channel, kept)
    for end in range(40, len(long_text), 40):
        await first.deliver(reply(long_text[:end]))
        clock.advance(1.0)
    made = len(kept.parts[("rec", "c1", "turn-1")])
    assert made >= 4

    # The turn ran again and answered more briefly: its final alone is delivered.
    await restarted(managing, channel, kept).deliver(reply(" ".join(SENTENCES[:3]), final=True))

    assert list(shown(channel).values()) == [" ".join(SENTENCES[:2]), SENTENCES[2]]
    assert len(channel.of("send_with_id")) == made  # nothing new sent
    assert len(channel.of("delete")) == made - 2


async def test_where_the_platform_cannot_delete_a_left_over_part_is_withdrawn_by_an_edit(
    managing: ManagerFactory, make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel(
        editable=True, edit_interval_s=1.0, limit=PlatformLimit(100, "chars"), cls=WholeSendChannel
    )
    kept = KeptStreams()
    first = restarted(managing, channel, kept)
    await first.deliver(reply(" ".join(SENTENCES[:4])))

    await restarted(managing, channel, kept).deliver(reply(SENTENCES[0], final=True))

    assert list(shown(channel).values()) == [SENTENCES[0], WITHDRAWN_TEXT]


async def test_an_earlier_message_that_cannot_be_edited_is_replaced(
    managing: ManagerFactory, make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel(editable=True, edit_interval_s=1.0, cls=DeletingChannel)
    kept = KeptStreams()
    await restarted(managing, channel, kept).deliver(reply("The reply"))
    channel.fail("edit", ValueError("message to edit not found"))

    ids = await restarted(managing, channel, kept).deliver(reply("The reply, whole", final=True))

    assert shown(channel) == {"m2": "The reply, whole"}
    assert ids == ["m2"]
    assert kept.parts[("rec", "c1", "turn-1")] == {0: "m2"}
