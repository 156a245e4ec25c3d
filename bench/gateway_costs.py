"""What a turn costs the gateway's process besides time: the collector's pauses (the daemon's
policy against CPython's schedule) and the calls made on the loop's thread (a count of the work
that does not move with the machine's speed)."""

from __future__ import annotations

from pathlib import Path

from bench.bench_channel import BenchChannel
from bench.collector_pauses import collector_pauses
from bench.gateway_runtime import SUITE, bus_baseline, throughput, with_runtime
from bench.loop_calls import loop_calls
from bench.report import Figure


async def collector_figures(base: Path) -> list[Figure]:
    """The collector's pauses over 10,000 turns at 100 chats, as the daemon sets it and on
    CPython's schedule for the older generations (the baseline), run alternately."""
    figures: list[Figure] = []
    for cpython_schedule, label in ((True, "CPython's schedule (baseline)"), (False, "daemon")):

        async def run(channel: BenchChannel) -> tuple[int, float, float]:
            with collector_pauses() as pauses:
                await throughput(channel, 100, 10_000)
            return pauses.collections, pauses.total_s, pauses.longest_s

        collections, total_s, longest_s = await with_runtime(
            base / f"collector-{label[:7]}", run, cpython_schedule=cpython_schedule
        )
        figures.append(
            Figure(
                SUITE,
                f"collections in 10,000 turns, 100 chats, {label}",
                collections,
                "collections",
            )
        )
        figures.append(
            Figure(
                SUITE,
                f"collector time per turn, 100 chats, {label}",
                round(total_s / 10_000 * 1e6, 1),
                "us",
            )
        )
        figures.append(
            Figure(
                SUITE,
                f"longest collector pause, 100 chats, {label}",
                round(longest_s * 1e3, 1),
                "ms",
            )
        )
    return figures


CALLS_TURNS = 2_000


async def calls_figures(base: Path) -> list[Figure]:
    """Python and builtin calls a turn makes on the loop's thread at 100 chats (after as many
    turns again to warm the chats up), against a message through the bus alone."""

    async def run(channel: BenchChannel) -> tuple[int, int]:
        await throughput(channel, 100, CALLS_TURNS)
        with loop_calls() as calls:
            await throughput(channel, 100, CALLS_TURNS, first=CALLS_TURNS)
        return calls.python, calls.builtin

    python, builtin = await with_runtime(base / "calls", run)
    with loop_calls() as bus:
        await bus_baseline(CALLS_TURNS)
    figures = []
    for kind, turn, message in (("Python", python, bus.python), ("builtin", builtin, bus.builtin)):
        figures.append(
            Figure(
                SUITE,
                f"{kind} calls per message, bus alone (baseline)",
                round(message / CALLS_TURNS),
                "calls",
            )
        )
        figures.append(
            Figure(
                SUITE,
                f"{kind} calls per turn on the loop's thread, 100 chats",
                round(turn / CALLS_TURNS),
                "calls",
            )
        )
    return figures
