from __future__ import annotations

import pytest

from gateway.agents.snapshots import SnapshotPacing, SnapshotStream
from tests.gateway.agents.conftest import SnapshotRecorder


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def test_first_delta_is_emitted_at_once(recorder: SnapshotRecorder) -> None:
    stream = SnapshotStream(recorder, SnapshotPacing(interval_s=0.1, clock=FakeClock()))
    await stream.append("Hel")
    assert recorder.snapshots == ["Hel"]


async def test_deltas_within_the_interval_are_coalesced(recorder: SnapshotRecorder) -> None:
    clock = FakeClock()
    stream = SnapshotStream(recorder, SnapshotPacing(interval_s=0.1, clock=clock))
    await stream.append("a")
    for piece in "bcd":
        clock.advance(0.02)
        await stream.append(piece)
    assert recorder.snapshots == ["a"]
    clock.advance(0.05)  # 0.11 s after the first snapshot
    await stream.append("e")
    assert recorder.snapshots == ["a", "abcde"]


async def test_finish_always_emits_the_final_text(recorder: SnapshotRecorder) -> None:
    clock = FakeClock()
    stream = SnapshotStream(recorder, SnapshotPacing(interval_s=0.1, clock=clock))
    await stream.append("one")
    await stream.append(" two")
    assert await stream.finish() == "one two"
    assert recorder.snapshots == ["one", "one two"]


async def test_finish_does_not_repeat_the_last_snapshot(recorder: SnapshotRecorder) -> None:
    stream = SnapshotStream(recorder, SnapshotPacing(interval_s=0.0, clock=FakeClock()))
    await stream.append("all")
    assert await stream.finish() == "all"
    assert recorder.snapshots == ["all"]


async def test_empty_reply_emits_nothing(recorder: SnapshotRecorder) -> None:
    stream = SnapshotStream(recorder, SnapshotPacing(clock=FakeClock()))
    await stream.append("")
    assert await stream.finish() == ""
    assert recorder.snapshots == []


async def test_snapshots_are_whole_texts_never_deltas(recorder: SnapshotRecorder) -> None:
    clock = FakeClock()
    stream = SnapshotStream(recorder, SnapshotPacing(interval_s=0.1, clock=clock))
    words = [f"w{i} " for i in range(50)]
    for word in words:
        clock.advance(0.03)
        await stream.append(word)
    await stream.finish()
    recorder.assert_grows_to("".join(words))
    # 50 deltas 30 ms apart over 1.5 s: about one snapshot per 100 ms, not one per delta.
    assert 10 <= len(recorder.snapshots) <= 20


async def test_append_after_finish_is_a_bug(recorder: SnapshotRecorder) -> None:
    stream = SnapshotStream(recorder, SnapshotPacing(clock=FakeClock()))
    await stream.finish()
    with pytest.raises(RuntimeError):
        await stream.append("late")


async def test_parts_are_joined_only_when_emitting() -> None:
    """The text is kept as parts: a long reply costs linear work, not a join per delta."""
    joined: list[int] = []

    async def sink(text: str) -> None:
        joined.append(len(text))

    clock = FakeClock()
    stream = SnapshotStream(sink, SnapshotPacing(interval_s=0.1, clock=clock))
    for _ in range(10_000):
        await stream.append("x")  # the clock does not move: nothing after the first is emitted
    assert joined == [1]
    assert await stream.finish() == "x" * 10_000
    assert joined == [1, 10_000]
