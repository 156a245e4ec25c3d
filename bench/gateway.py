"""The whole pipeline in one process: bench channel -> journal -> dispatcher -> echo agent ->
session write-behind -> split -> bench channel send.

A real `ProfileRuntime` runs with a plugin channel that publishes messages (up to 256 sends in
flight, as a platform with many chats does) and records replies; the journal and sessions are
on disk with the default `fsync: batch`. Only turns are counted: a reply counts when it carries
the turn's delivery id and is not an apology. Figures:

- turns per second with 1, 100 and 10,000 distinct chats, against the bus alone (baseline):
  the median of three runs, each on a fresh runtime and data directory, with the disk's earlier
  writes flushed first (the baseline likewise a median of three), with the slowest run shown;
  the clock stops at the last reply (in the 10,000 case every chat is new, and the syncs of
  its session files are left to the checkpoint after);
- turns per second at 100 chats when 50,000 messages come at once, against the 10,000-message
  run (target: at least 0.8 of it): a backlog larger than the journal's checkpoint threshold;
- a new chat's first turn against a known chat's turn, the clock stopped once the checkpoint
  has synced their session files (`bench.gateway_new_chats`);
- the collector's time per turn and longest pause over 10,000 turns at 100 chats, as the
  daemon sets it (`gateway.daemon.collector`) against the older generations on CPython's schedule;
- Python and builtin calls per turn on the loop's thread at 100 chats, against a message
  through the bus alone: a count of the work, which does not move with the machine's speed;
- p50 / p99 latency added at a fixed 500 messages per second, against the disk's own
  append + fdatasync latency measured back to back in the same run (target: p99 <= 3x the
  disk's p99 + 2 ms); the disk synced at that pace is reported too, for context;
- resident memory per idle chat: 10,000 new chats each answered once (256 at a time, so what
  is measured is chats, not a backlog of unanswered messages), after a checkpoint, once a first
  10,000 chats have brought the allocator's arenas, thread pools and caches to their working
  size (that fixed cost is reported too, as is what a 10,000-message burst leaves resident:
  the allocator keeps the burst's peak);
- start-up to ready with 10,000 idle sessions and 50 interrupted turns on disk, against
  start-up on an empty data directory (target: within 0.5 s of it).
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from bench.bench_channel import IN_FLIGHT, BenchChannel, send_all
from bench.gateway_costs import calls_figures, collector_figures
from bench.gateway_new_chats import new_chat_figures
from bench.gateway_runtime import (
    PROFILE,
    SUITE,
    bench_message,
    bench_runtime,
    bus_baseline,
    running,
    throughput,
    with_runtime,
)
from bench.report import Figure
from bus import Message
from bus.session_key import SessionKey
from gateway.daemon.profile import JOURNAL_DIR, ProfileRuntime
from gateway.logs import configure_logging
from gateway.turn.journal import Journal
from sessions import SessionStore

RATE_PER_S = 500
#: Each throughput figure is the median of this many runs, each on a fresh runtime and data
#: directory (and the bus baseline the median of as many): one run swings with the machine.
RUNS = 3
RATE_SECONDS = 4
#: A burst five times the 100-chat run's: its backlog outgrows the journal's checkpoint
#: threshold (10,000 records), which must not make every record rewrite the whole backlog.
BURST = 50_000


async def _answer_chats(channel: BenchChannel, first: int, chats: int) -> None:
    """One message in each of `chats` new chats, IN_FLIGHT at a time, each answered."""
    for start in range(first, first + chats, IN_FLIGHT):
        batch = [
            bench_message(n, 1_000_000_000)
            for n in range(start, min(first + chats, start + IN_FLIGHT))
        ]
        channel.expect(len(batch))
        await send_all(channel, batch)
        await channel.all_answered.wait()


async def _idle_chat_bytes(
    runtime: ProfileRuntime, channel: BenchChannel, chats: int
) -> tuple[float, float]:
    """Resident memory per chat over the first `chats` chats (the allocator's arenas, thread
    pools and caches reach their working size there: a fixed cost), then per chat over the
    next `chats` new chats, each answered and idle, after a checkpoint."""
    process = psutil.Process()
    growth: list[float] = []
    for first in (1_000_000, 2_000_000):
        await runtime.checkpoint()
        gc.collect()
        before = process.memory_info().rss
        await _answer_chats(channel, first, chats)
        await runtime.checkpoint()
        gc.collect()
        growth.append((process.memory_info().rss - before) / chats)
    return growth[0], growth[1]


async def _latencies(channel: BenchChannel) -> list[float]:
    assert channel.inbound is not None
    inbound = channel.inbound
    count = RATE_PER_S * RATE_SECONDS
    channel.expect(count)
    sent: dict[str, float] = {}
    started = time.perf_counter()
    async with asyncio.TaskGroup() as tasks:
        for number in range(count):
            due = started + number / RATE_PER_S
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            message = bench_message(number, 100)
            sent[str(number)] = time.perf_counter()
            tasks.create_task(inbound.send(message))
    await channel.all_answered.wait()
    return [channel.reply_times[key] - sent[key] for key in sent]


def _raw_disk_latencies(
    directory: Path, count: int = 2000, *, interval_s: float = 0.0, name: str = "raw-disk.bin"
) -> list[float]:
    """What the disk itself takes for one small append and its fdatasync: back to back, or one
    every `interval_s` (the pace of the latency runs, where the disk idles between syncs)."""
    path = directory / name
    record = b"x" * 200
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    timings: list[float] = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            os.write(fd, record)
            os.fdatasync(fd)
            timings.append(time.perf_counter() - started)
            if interval_s:
                time.sleep(interval_s)
    finally:
        os.close(fd)
    return timings


async def _seed_restart_data(root: Path, idle_sessions: int, interrupted: int) -> None:
    """A data directory as a busy daemon leaves it when killed: many idle sessions on disk and
    turns accepted into the journal but never answered."""
    async with SessionStore(root, fsync="never") as store:
        for number in range(idle_sessions):
            key = SessionKey.for_chat(PROFILE, "bench", f"idle-{number}")
            await store.append_all(key, [Message.user("hello"), Message.assistant("hello")])
    journal = Journal(root / JOURNAL_DIR, fsync="never")
    await journal.open()
    for number in range(interrupted):
        _received, durable = journal.accept(bench_message(1_000_000 + number, 50))
        await durable
    await journal.close()


async def _start_up_s(data_dir: Path) -> float:
    runtime = bench_runtime(data_dir)
    started = time.perf_counter()
    async with running(runtime):
        elapsed = time.perf_counter() - started
    return elapsed


def _latency_figures(latencies: list[float], label: str, target: str | None = None) -> list[Figure]:
    quantiles = statistics.quantiles(latencies, n=100)
    return [
        Figure(SUITE, f"{label} {name}", round(quantiles[index] * 1000, 2), "ms")
        for name, index in (("p50", 49), ("p99", 98))
    ]


async def _measure() -> list[Figure]:
    configure_logging("warning", once_per_process=True)
    figures: list[Figure] = []
    process = psutil.Process()
    with tempfile.TemporaryDirectory(prefix="octos-bench-") as tmp:
        base = Path(tmp)
        rates: dict[int, list[float]] = {}
        for chats, count in ((1, 2000), (100, 10_000), (10_000, 10_000)):

            async def run(channel: BenchChannel, c: int = chats, n: int = count) -> float:
                return await throughput(channel, c, n)

            rates[chats] = []
            for attempt in range(RUNS):
                await asyncio.to_thread(os.sync)  # the runs before leave no writeback to this one
                gc.collect()
                rss_before = process.memory_info().rss
                rates[chats].append(await with_runtime(base / f"chats-{chats}-{attempt}", run))
                if chats == 10_000 and attempt == 0:
                    gc.collect()
                    grown = process.memory_info().rss - rss_before
                    figures.append(
                        Figure(
                            SUITE,
                            "resident after a 10,000-message burst over 10,000 chats, per chat",
                            round(grown / chats),
                            "B",
                        )
                    )
        bursts = []
        for attempt in range(RUNS):
            await asyncio.to_thread(os.sync)
            gc.collect()
            bursts.append(
                await with_runtime(
                    base / f"burst-{attempt}", lambda channel: throughput(channel, 100, BURST)
                )
            )
        warm_up, idle = await with_runtime(
            base / "idle-chats",
            None,
            on_runtime=lambda runtime, channel: _idle_chat_bytes(runtime, channel, 10_000),
        )
        figures.append(
            Figure(
                SUITE,
                "resident growth per chat over the first 10,000 chats (fixed: arenas, pools)",
                round(warm_up),
                "B",
            )
        )
        figures.append(
            Figure(
                SUITE,
                "resident memory per idle chat, 10,000 more chats",
                round(idle),
                "B",
                "<= 2048",
                idle <= 2048,
            )
        )
        baseline = statistics.median([await bus_baseline(10_000) for _ in range(RUNS)])
        for chats, target in ((1, None), (100, ">= 5000"), (10_000, ">= 3000")):
            rate = round(statistics.median(rates[chats]))
            ok = None if target is None else rate >= int(target.split()[-1])
            name = f"turns/s end to end, {chats} chats"
            figures.append(Figure(SUITE, name, rate, "turns/s", target, ok))
            figures.append(
                Figure(SUITE, f"{name}, slowest run", round(min(rates[chats])), "turns/s")
            )
        figures.append(Figure(SUITE, "bus alone (baseline), 100 chats", round(baseline), "msg/s"))
        figures.append(
            Figure(
                SUITE,
                "turns / bus alone, 100 chats",
                round(statistics.median(rates[100]) / baseline, 4),
                "ratio",
            )
        )
        burst_rate = statistics.median(bursts)
        figures.append(
            Figure(
                SUITE,
                f"turns/s end to end, 100 chats, a {BURST:,}-message burst",
                round(burst_rate),
                "turns/s",
            )
        )
        burst_ratio = burst_rate / statistics.median(rates[100])
        figures.append(
            Figure(
                SUITE,
                f"{BURST:,}-message burst / 10,000-message burst, 100 chats",
                round(burst_ratio, 2),
                "ratio",
                ">= 0.8",
                burst_ratio >= 0.8,
            )
        )
        figures += await new_chat_figures(base, RUNS)
        figures += await collector_figures(base)
        figures += await calls_figures(base)
        # The throughput runs wrote tens of thousands of session files: their writeback must
        # not land in the latency runs (nor in the disk's baseline).
        await asyncio.to_thread(os.sync)
        raw = await asyncio.to_thread(_raw_disk_latencies, base)
        latencies = await with_runtime(base / "latency", _latencies)
        unsynced = await with_runtime(base / "latency-never", _latencies, fsync="never")
        raw_p99 = statistics.quantiles(raw, n=100)[98]
        p99 = statistics.quantiles(latencies, n=100)[98]
        figures += _latency_figures(raw, "disk append + fdatasync (baseline)")
        # Context, not the target's baseline: the same disk synced at the latency runs' pace.
        paced = await asyncio.to_thread(
            _raw_disk_latencies, base, interval_s=1 / RATE_PER_S, name="paced-disk.bin"
        )
        figures += _latency_figures(paced, f"disk append + fdatasync at {RATE_PER_S}/s")
        figures += _latency_figures(latencies, f"added latency at {RATE_PER_S} msg/s, fsync batch")
        budget_ms = 3 * raw_p99 * 1000 + 2
        figures.append(
            Figure(
                SUITE,
                "added latency p99 / (3 x disk p99 + 2 ms)",
                round(p99 * 1000 / budget_ms, 3),
                "ratio",
                "<= 1",
                p99 * 1000 <= budget_ms,
            )
        )
        figures += _latency_figures(unsynced, f"added latency at {RATE_PER_S} msg/s, fsync never")
        empty_s = await _start_up_s(base / "start-empty")
        seeded = base / "start-seeded"
        await _seed_restart_data(seeded / PROFILE, idle_sessions=10_000, interrupted=50)
        seeded_s = await _start_up_s(seeded)
        figures.append(
            Figure(SUITE, "start-up, empty data directory (baseline)", round(empty_s, 3), "s")
        )
        figures.append(
            Figure(
                SUITE,
                "start-up, 10,000 idle sessions and 50 interrupted turns",
                round(seeded_s, 3),
                "s",
                f"<= baseline + 0.5 s ({empty_s + 0.5:.2f})",
                seeded_s <= empty_s + 0.5,
            )
        )
    return figures


def run() -> list[Figure]:
    return asyncio.run(_measure())
