"""Append latency of the PostgreSQL session store, beside the JSONL figures of the same run.

Uses the server of `OCTOS_BENCH_POSTGRES` (an admin DSN; default the local one, user postgres)
in a database of its own, dropped afterwards. Without a server the figures are left out, with a
note on stderr: the other suites still run.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench.report import Figure
from sessions.postgres import PostgresSessionStore, StoreUnavailable
from sessions.store import SessionStoreProtocol

ADMIN_DSN = os.environ.get("OCTOS_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
TIMEOUT_S = 10.0

Measure = Callable[[SessionStoreProtocol, int, int], Awaitable[list[float]]]
Cases = list[tuple[int, int, str]]


# As tests/support/postgres.py does, on purpose: the benchmarks do not import the test suite.
async def _admin(statement: str) -> None:
    connection = await asyncpg.connect(ADMIN_DSN, timeout=TIMEOUT_S)
    try:
        await connection.execute(statement, timeout=TIMEOUT_S * 3)
    finally:
        await connection.close(timeout=TIMEOUT_S)


@asynccontextmanager
async def bench_database(suite: str) -> AsyncIterator[str | None]:
    """The DSN of a database of this run's own (dropped afterwards); None without a server."""
    name = f"octos_bench_{secrets.token_hex(4)}"
    try:
        await _admin(f'CREATE DATABASE "{name}"')
    except (OSError, TimeoutError, asyncpg.PostgresError) as error:
        print(f"{suite}: PostgreSQL figures left out ({ADMIN_DSN}: {error})", file=sys.stderr)
        yield None
        return
    parts = urlsplit(ADMIN_DSN)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def postgres_latency_figures(
    suite: str,
    measure: Measure,
    cases: Cases,
    percentile: Callable[[list[float], float], float],
    jsonl_p50_ms: dict[str, float],
) -> list[Figure]:
    """p50/p99 of appends to PostgreSQL for each case, and p50 against JSONL's (fsync batch)."""
    figures: list[Figure] = []
    async with bench_database(suite) as dsn:
        if dsn is None:
            return figures
        try:
            for sessions, appends, label in cases:
                async with PostgresSessionStore(dsn, f"bench{sessions}", pool_size=8) as store:
                    samples = await measure(store, sessions, appends)
                figures += _case_figures(suite, label, samples, percentile, jsonl_p50_ms.get(label))
        except StoreUnavailable as error:
            print(f"{suite}: PostgreSQL figures left out ({error})", file=sys.stderr)
    return figures


def _case_figures(
    suite: str,
    label: str,
    samples: list[float],
    percentile: Callable[[list[float], float], float],
    jsonl_p50_ms: float | None,
) -> list[Figure]:
    figures = [
        Figure(
            suite,
            f"append {stat}, PostgreSQL, {label}",
            round(percentile(samples, fraction) * 1000, 3),
            "ms",
        )
        for stat, fraction in (("p50", 0.5), ("p99", 0.99))
    ]
    if jsonl_p50_ms:
        ratio = percentile(samples, 0.5) * 1000 / jsonl_p50_ms
        figures.append(
            Figure(
                suite,
                f"append p50 PostgreSQL / JSONL fsync batch, {label}",
                round(ratio, 2),
                "ratio",
            )
        )
    return figures
