"""Coalescing of a streamed reply into snapshots, at the source.

A model streams many small deltas (often one per token). Re-sending the whole text for each
would cost quadratic work and flood the channel, so the reply is kept as a list of parts,
joined only when a snapshot is emitted, and at most one snapshot leaves per `interval_s`. The
first text is emitted at once (the user sees the reply start without delay) and the final text
always is, so the last snapshot equals the reply.

Snapshots are emitted when a delta arrives, not on a timer: text that arrives within the
interval waits for the next delta or for `finish()`. Downstream editing is throttled far more
coarsely (about once a second per chat), so a timer would buy nothing but a task per turn.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass

from gateway.agents.base import SnapshotSink

DEFAULT_SNAPSHOT_INTERVAL_S = 0.1


@dataclass(frozen=True, slots=True)
class SnapshotPacing:
    """How often an agent shows its growing reply: every agent takes one (tests pace by a fake
    clock, or with `interval_s=0` every delta) and starts each reply's stream from it."""

    interval_s: float = DEFAULT_SNAPSHOT_INTERVAL_S
    clock: Callable[[], float] = time.monotonic

    def stream(self, sink: SnapshotSink) -> SnapshotStream:
        return SnapshotStream(sink, self)

    async def relay(self, deltas: AsyncGenerator[str, None], sink: SnapshotSink) -> str:
        """The whole reply of a streamed answer: each of `deltas` into a stream to `sink`.

        `deltas` is closed however this ends (finished, failed, cancelled), so the connection
        it reads from is released at once rather than when the generator is collected.
        """
        stream = self.stream(sink)
        async with aclosing(deltas) as opened:
            async for delta in opened:
                await stream.append(delta)
        return await stream.finish()


#: A snapshot at most every `DEFAULT_SNAPSHOT_INTERVAL_S` of the monotonic clock.
DEFAULT_PACING = SnapshotPacing()


class SnapshotStream:
    """Collects the deltas of one reply and feeds throttled whole-text snapshots to a sink."""

    def __init__(self, sink: SnapshotSink, pacing: SnapshotPacing = DEFAULT_PACING) -> None:
        self._sink = sink
        self._interval_s = max(0.0, pacing.interval_s)
        self._clock = pacing.clock
        self._parts: list[str] = []
        self._emitted = ""
        self._emitted_at: float | None = None
        self._dirty = False
        self._finished = False

    @property
    def text(self) -> str:
        """The whole reply so far (joins the parts; keep it out of per-delta loops)."""
        return self._collapse()

    @property
    def emitted(self) -> str:
        """The text of the last snapshot sent to the sink."""
        return self._emitted

    async def append(self, delta: str) -> None:
        """Add a delta; emits a snapshot when the interval since the last one has passed."""
        if self._finished:
            raise RuntimeError("append() after finish()")
        if not delta:
            return
        self._parts.append(delta)
        self._dirty = True
        now = self._clock()
        if self._emitted_at is None or now - self._emitted_at >= self._interval_s:
            await self._emit(now)

    async def finish(self) -> str:
        """Emit the final text unless it was the last snapshot; returns the whole reply."""
        self._finished = True
        if self._dirty:
            await self._emit(self._clock())
        return self._collapse()

    async def _emit(self, now: float) -> None:
        text = self._collapse()
        self._dirty = False
        self._emitted_at = now
        if text and text != self._emitted:
            self._emitted = text
            await self._sink(text)

    def _collapse(self) -> str:
        # Keep the joined text as the only part, so the next join only copies it once more.
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""
