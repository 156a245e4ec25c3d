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


async def _durable_rate(
    runtime: ProfileRuntime, channel: BenchChannel, chats: int, first: int
) -> float:
    """Turns per second from the first message to the checkpoint that syncs their sessions."""
    await asyncio.to_thread(os.sync)  # the phase before leaves no writeback to this one
    gc.collect()
    started = time.perf_counter()
    await throughput(channel, chats, TURNS, first)
    await runtime.checkpoint()
    return TURNS / (time.perf_counter() - started)


async def _known_and_new(runtime: ProfileRuntime, channel: BenchChannel) -> tuple[float, float]:
    await throughput(channel, KNOWN_CHATS, KNOWN_CHATS, WARM_UP_FIRST)
    await runtime.checkpoint()
    known = await _durable_rate(runtime, channel, KNOWN_CHATS, 0)
    new = await _durable_rate(runtime, channel, EVERY_MESSAGE_A_CHAT, NEW_CHATS_FIRST)
    return known, new


async def new_chat_figures(base: Path, runs: int) -> list[Figure]:
    """The median of `runs` runs, each on a fresh runtime and data directory."""
    known: list[float] = []
    new: list[float] = []
    for attempt in range(runs):
        known_rate, new_rate = await with_runtime(
            base / f"new-chats-{attempt}", None, on_runtime=_known_and_new
        )
        known.append(known_rate)
        new.append(new_rate)
    ratio = statistics.median(k / n for k, n in zip(known, new, strict=True))
    label = "turns/s to durable sessions"
    return [
        Figure(
            SUITE, f"{label}, {KNOWN_CHATS} known chats", round(statistics.median(known)), "turns/s"
        ),
        Figure(SUITE, f"{label}, {TURNS:,} new chats", round(statistics.median(new)), "turns/s"),
        Figure.at_most(
            SUITE,
            "a new chat's first turn / a known chat's turn (median of the runs' ratios)",
            ratio,
            "ratio",
            MOST_COST_RATIO,
            digits=2,
        ),
    ]
