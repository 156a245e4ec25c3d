from __future__ import annotations

import asyncio

import pytest

from config import EchoAgentConfig
from gateway.agents import EchoAgent, SnapshotPacing, create_agent
from gateway.agents.echo import split_into_pieces
from tests.gateway.agents.conftest import SnapshotRecorder, make_turn


@pytest.mark.parametrize(
    ("text", "pieces", "expected"),
    [
        ("one two three", 3, ["one ", "two ", "three"]),
        ("hello world", 3, ["hello ", "world"]),
        ("single", 3, ["si", "ng", "le"]),
        ("a b c d e f", 2, ["a b c ", "d e f"]),
        ("anything at all", 1, ["anything at all"]),
        ("", 3, []),
    ],
)
def test_split_into_pieces(text: str, pieces: int, expected: list[str]) -> None:
    assert split_into_pieces(text, pieces) == expected


def test_split_without_spaces_keeps_grapheme_clusters_whole() -> None:
    family = "👨\u200d👩\u200d👧"  # one grapheme cluster, five code points
    text = f"{family}好{family}"
    pieces = split_into_pieces(text, 3)
    assert pieces == [family, "好", family]


def test_split_pieces_join_back_to_the_text() -> None:
    text = "The quick brown fox jumps over the lazy dog, twice over."
    for count in range(1, 15):
        pieces = split_into_pieces(text, count)
        assert "".join(pieces) == text
        assert all(pieces)
        assert len(pieces) <= count


async def test_echo_streams_snapshots_that_grow_to_the_text(recorder: SnapshotRecorder) -> None:
    agent = EchoAgent(pieces=4, snapshots=SnapshotPacing(interval_s=0.0))
    text = "streamed in four growing pieces"
    reply = await agent.run(make_turn(text), recorder)
    assert reply.content == text
    assert len(recorder.snapshots) == 4
    recorder.assert_grows_to(text)
    assert reply.usage.input_tokens == 5
    assert reply.usage.output_tokens == 5


async def test_echo_is_cancellable_between_pieces(recorder: SnapshotRecorder) -> None:
    agent = EchoAgent(delay_s=3600, pieces=3, snapshots=SnapshotPacing(interval_s=0.0))
    run = asyncio.create_task(agent.run(make_turn("one two three"), recorder), name="echo-turn")
    await asyncio.wait_for(recorder.first.wait(), timeout=5)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert recorder.snapshots == ["one "]


async def test_create_agent_builds_echo_from_config(recorder: SnapshotRecorder) -> None:
    async with create_agent(EchoAgentConfig(pieces=2)) as agent:
        assert isinstance(agent, EchoAgent)
        reply = await agent.run(make_turn("ping pong"), recorder)
    assert reply.content == "ping pong"
    assert recorder.snapshots[-1] == "ping pong"


@pytest.mark.parametrize("text", ["", "one", "hello there", "一二三"])
@pytest.mark.parametrize("interval_s", [0.0, 0.1, 3600.0])
async def test_echo_of_one_piece_shows_what_a_snapshot_stream_shows(
    text: str, interval_s: float
) -> None:
    # The one-piece reply skips the stream: it must show and return exactly what one shows.
    pacing = SnapshotPacing(interval_s=interval_s)
    through_stream = SnapshotRecorder()
    stream = pacing.stream(through_stream)
    for piece in split_into_pieces(text, 1):
        await stream.append(piece)
    streamed = await stream.finish()
    direct = SnapshotRecorder()
    reply = await EchoAgent(pieces=1, snapshots=pacing).run(make_turn(text), direct)
    assert reply.content == streamed == text
    assert direct.snapshots == through_stream.snapshots
