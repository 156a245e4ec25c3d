"""What a chat's first turn costs against a known chat's, counting the work a turn leaves
behind as well as the turn.

A new chat's session file and its directories are made behind the journal and made durable
at the journal's next checkpoint, so a throughput figure that stops the clock at the last
reply leaves out most of what a new chat costs. Here the clock runs from the first message
to the end of the checkpoint that syncs the turns' session files, as it would for someone
timing the daemon from outside over a run long enough to hold its checkpoints:

- 10,000 turns over 100 known chats (each has talked before: its file exists and is synced);
- 10,000 turns over 10,000 chats that are all new (a session file and two directories each,
  and their syncs);

both on one runtime, known chats first, with the disk's earlier writes flushed before each.
The target is on their ratio, measured within each run: a new chat's first turn costs at
most twice a known chat's.
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from bench.bench_channel import BenchChannel
from bench.gateway_runtime import SUITE, throughput, with_runtime
from bench.report import Figure
from gateway.daemon.profile import ProfileRuntime

TURNS = 10_000
KNOWN_CHATS = 100
#: `bench_message` puts message n in chat n % chats. The known chats' turns are numbered from
#: 0 (their first turns from WARM_UP_FIRST), so chats 0-99; with a modulus above every number
#: sent, each message from NEW_CHATS_FIRST is in a chat of its own that nothing went to before.
#: (A number is also a message's platform id: one sent again is a duplicate, not a turn.)
WARM_UP_FIRST = 50_000_000
NEW_CHATS_FIRST = 100_000
EVERY_MESSAGE_A_CHAT = 100_000_000
MOST_COST_RATIO = 2.0


@dataclass(frozen=True, slots=True)
class _Phase:
    """10,000 turns: to the last reply, then to the end of the checkpoint after it."""

    replies_s: float
    checkpoint_s: float

    @property
    def rate(self) -> float:
        return TURNS / (self.replies_s + self.checkpoint_s)


async def _durable_phase(
    runtime: ProfileRuntime, channel: BenchChannel, chats: int, first: int
) -> _Phase:
    """From the first message to the checkpoint that syncs their sessions."""
    await asyncio.to_thread(os.sync)  # the phase before leaves no writeback to this one
    gc.collect()
    started = time.perf_counter()
    await throughput(channel, chats, TURNS, first)
    replied = time.perf_counter()
    await runtime.checkpoint()
    return _Phase(replied - started, time.perf_counter() - replied)


async def _known_and_new(runtime: ProfileRuntime, channel: BenchChannel) -> tuple[_Phase, _Phase]:
    await throughput(channel, KNOWN_CHATS, KNOWN_CHATS, WARM_UP_FIRST)
    await runtime.checkpoint()
    known = await _durable_phase(runtime, channel, KNOWN_CHATS, 0)
    new = await _durable_phase(runtime, channel, EVERY_MESSAGE_A_CHAT, NEW_CHATS_FIRST)
    return known, new


async def new_chat_figures(base: Path, runs: int) -> list[Figure]:
    """The median of `runs` runs, each on a fresh runtime and data directory; the ratio is
    taken within each run (both phases on one runtime, moments apart), then the median and
    the highest of the runs' ratios are shown."""
    known: list[_Phase] = []
    new: list[_Phase] = []
    for attempt in range(runs):
        known_phase, new_phase = await with_runtime(
            base / f"new-chats-{attempt}", None, on_runtime=_known_and_new
        )
        known.append(known_phase)
        new.append(new_phase)
    ratios = [k.rate / n.rate for k, n in zip(known, new, strict=True)]
    label = "turns/s to durable sessions"
    cost = "cost of a new chat's first turn / a known chat's turn"
    return [
        Figure(
            SUITE,
            f"{label}, {KNOWN_CHATS} known chats",
            round(statistics.median(p.rate for p in known)),
            "turns/s",
        ),
        Figure(
            SUITE,
            f"{label}, {TURNS:,} new chats",
            round(statistics.median(p.rate for p in new)),
            "turns/s",
        ),
        Figure(
            SUITE,
            f"{TURNS:,} new chats: from the last reply to their sessions synced",
            round(statistics.median(p.checkpoint_s for p in new), 3),
            "s",
        ),
        Figure.at_most(
            SUITE,
            f"{cost} (median of {runs} runs)",
            statistics.median(ratios),
            "x",
            MOST_COST_RATIO,
            digits=2,
        ),
        Figure(SUITE, f"{cost} (highest of {runs} runs)", round(max(ratios), 2), "x"),
    ]
