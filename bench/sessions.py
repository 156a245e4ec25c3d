"""Session store figures: append latency, append cost against session length, load, memory.

- Append latency p50/p99 under fsync `batch` and `always`, for one session appending alone
  and for 100 sessions appending at once (each append is timed from call to durable return).
- The cost of an append to a session of 100,000 messages over one of 100, measured in the same
  run, interleaved: an O(1) append keeps this near 1 (a peer rewrites the whole file per turn,
  which makes it about a thousand). Measured with fsync `never` too, where no disk wait hides
  CPU work that grows with the session.
- The same append latencies with the PostgreSQL store (`bench.sessions_postgres`), and its p50
  against JSONL's under fsync `batch`, when a server answers.
- Loading a 10 MB session, against the floor of parsing its lines with `json.loads`.
- Memory (traced Python allocations) per session loaded in the manager, and what is left per
  session once the manager has evicted it (nothing should be).
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench.report import Figure
from bus import Message, SessionKey
from sessions import FsyncPolicy, Session, SessionManager, SessionStore
from sessions.meta import SessionMeta
from sessions.store import SessionStoreProtocol

SUITE = "sessions"
MAX_RATIO = 1.5
SINGLE_APPENDS = 1000
CONCURRENT_SESSIONS = 100
APPENDS_PER_SESSION = 30
SHORT, LONG = 100, 100_000
RATIO_APPENDS = 2000
LOAD_BYTES = 10 * 1024 * 1024
MEMORY_SESSIONS = 500
MESSAGES_PER_SESSION = 20
LARGE_CAP = 1024**3  # no compaction while measuring append cost


def _key(chat: int, topic: str | None = None) -> SessionKey:
    return SessionKey("telegram", str(chat), "_main", topic)


def _turn(index: int) -> Message:
    if index % 2:
        return Message.assistant(f"reply {index}: " + "the answer, more or less. " * 4)
    return Message.user(f"question {index}: what about this?")


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _latencies(store: SessionStoreProtocol, sessions: int, appends: int) -> list[float]:
    samples: list[float] = []
    for chat in range(sessions):  # sessions exist: the first append is not a creation
        await store.append(_key(chat), _turn(0))

    async def session_appends(chat: int) -> None:
        for index in range(1, appends + 1):
            message = _turn(index)
            started = time.perf_counter()
            await store.append(_key(chat), message)
            samples.append(time.perf_counter() - started)

    async with asyncio.TaskGroup() as group:
        for chat in range(sessions):
            group.create_task(session_appends(chat), name=f"bench-appender-{chat}")
    return samples


async def _latency_figures(root: Path) -> list[Figure]:
    figures = []
    cases = [
        (1, SINGLE_APPENDS, "one session"),
        (CONCURRENT_SESSIONS, APPENDS_PER_SESSION, f"{CONCURRENT_SESSIONS} sessions at once"),
    ]
    batch_p50_ms: dict[str, float] = {}
    for fsync in ("batch", "always"):
        for sessions, appends, label in cases:
            async with SessionStore(root / f"{fsync}-{sessions}", fsync=fsync) as store:
                samples = await _latencies(store, sessions, appends)
            for name, fraction in (("p50", 0.5), ("p99", 0.99)):
                value_ms = _percentile(samples, fraction) * 1000
                figures.append(
                    Figure(
                        SUITE, f"append {name}, fsync {fsync}, {label}", round(value_ms, 3), "ms"
                    )
                )
            if fsync == "batch":
                batch_p50_ms[label] = _percentile(samples, 0.5) * 1000
    try:
        from bench.sessions_postgres import postgres_latency_figures
    except ModuleNotFoundError as missing:  # asyncpg: the `postgres` extra
        print(f"sessions: PostgreSQL figures left out ({missing})", file=sys.stderr)
        return figures
    figures += await postgres_latency_figures(SUITE, _latencies, cases, _percentile, batch_p50_ms)
    return figures


async def _seed(store: SessionStore, key: SessionKey, count: int) -> None:
    messages = [_turn(index) for index in range(count)]
    await store.rewrite(Session(key, SessionMeta.new(key), messages))


async def _append_cost_ratio(root: Path, fsync: FsyncPolicy) -> float:
    """Median append latency at LONG existing messages over SHORT, appends interleaved."""
    short, long = _key(1), _key(2)
    async with SessionStore(root, fsync=fsync, max_file_bytes=LARGE_CAP) as store:
        await _seed(store, short, SHORT)
        await _seed(store, long, LONG)
        samples: dict[SessionKey, list[float]] = {short: [], long: []}
        for key in (short, long):
            await store.append(key, _turn(0))  # the reopen after seeding is not an append
        for index in range(RATIO_APPENDS):
            # Alternating append by append, so both sessions see the same machine noise.
            for key in (short, long) if index % 2 else (long, short):
                message = _turn(index)
                started = time.perf_counter()
                await store.append(key, message)
                samples[key].append(time.perf_counter() - started)
    return statistics.median(samples[long]) / statistics.median(samples[short])


async def _load_figures(root: Path) -> list[Figure]:
    key = _key(1)
    async with SessionStore(root, max_file_bytes=LARGE_CAP) as store:
        line_bytes = len(_turn(1).to_json()) // 2 + len(_turn(0).to_json()) // 2 + 1
        await _seed(store, key, LOAD_BYTES // line_bytes)
        path = store.path_for(key)
        size_mb = path.stat().st_size / 1024 / 1024
        load_s, parse_s = [], []
        for _ in range(3):
            started = time.perf_counter()
            session = await store.load(key)
            load_s.append(time.perf_counter() - started)
            assert session is not None
            started = time.perf_counter()
            lines = path.read_bytes().splitlines()
            parsed = [json.loads(line) for line in lines]
            parse_s.append(time.perf_counter() - started)
            assert len(parsed) == len(session.messages) + 1
    return [
        Figure(SUITE, f"load a {size_mb:.1f} MB session", round(min(load_s) * 1000, 1), "ms"),
        Figure(
            SUITE,
            "load / json.loads of every line (baseline)",
            round(min(load_s) / min(parse_s), 2),
            "ratio",
        ),
    ]


def _traced_bytes() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def _memory_figures(root: Path) -> list[Figure]:
    async with SessionStore(root, fsync="never") as store:
        keys = [_key(chat % 50, f"topic-{chat}") for chat in range(MEMORY_SESSIONS)]
        for key in keys:
            await _seed(store, key, MESSAGES_PER_SESSION)
        manager = SessionManager(store, max_open=MEMORY_SESSIONS)
        tracemalloc.start()
        try:
            # One round first: interpreter caches (interned path parts, pydantic's string
            # cache) grow once and stay; they are not the sessions' memory.
            for key in keys:
                await manager.get(key)
            for key in keys:
                manager.evict(key)
            empty = _traced_bytes()
            for key in keys:
                await manager.get(key)
            loaded = _traced_bytes()
            for key in keys:
                manager.evict(key)
            evicted = _traced_bytes()
        finally:
            tracemalloc.stop()
    per_open = (loaded - empty) / MEMORY_SESSIONS
    per_evicted = max(0, evicted - empty) / MEMORY_SESSIONS
    return [
        Figure(
            SUITE,
            f"memory per open session ({MESSAGES_PER_SESSION} messages)",
            round(per_open),
            "B",
        ),
        Figure(SUITE, "memory left per evicted session", round(per_evicted), "B"),
    ]


async def _all_figures(root: Path) -> list[Figure]:
    figures = await _latency_figures(root / "latency")
    for fsync in ("batch", "never"):
        ratio = await _append_cost_ratio(root / f"ratio-{fsync}", fsync)
        figures.append(
            Figure.at_most(
                SUITE,
                f"append cost at {LONG:,} / at {SHORT} messages, fsync {fsync}",
                ratio,
                "ratio",
                MAX_RATIO,
                digits=3,
            )
        )
    figures += await _load_figures(root / "load")
    figures += await _memory_figures(root / "memory")
    return figures


def run() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as directory:
        return asyncio.run(_all_figures(Path(directory)))


if __name__ == "__main__":
    for figure in run():
        print(figure)
