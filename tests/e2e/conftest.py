"""The daemon subprocess with platform profiles, and what the platform tests read back from its
files (what they read from the daemon itself, its log events and /metrics, `DaemonProcess` says).

Each platform module runs one daemon for most of its tests (module scope, each test in a chat of
its own), because a daemon takes seconds to start; tests that stop the daemon start their own.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.support.daemon import DaemonProcess, write_config
from tests.support.nats import nats_client, nats_prefix, streams
from tests.support.postgres import postgres_dsn

#: The fixtures, for this directory.
__all__ = ["nats_client", "nats_prefix", "postgres_dsn", "streams"]

WAIT_S = 30.0
#: The edit interval the platform profiles configure, and the clock tolerance of the check.
EDIT_INTERVAL_S = 1.0
CLOCK_TOLERANCE_S = 0.05
#: Loopback is never proxied, whatever the developer's environment says.
DAEMON_ENV = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@asynccontextmanager
async def running_daemon(
    directory: Path,
    profiles: Mapping[str, str],
    *,
    grace_s: float = 10.0,
    gateway_settings: str = "",
) -> AsyncIterator[DaemonProcess]:
    """The daemon on a fresh config, killed on the way out if a test left it running."""
    config = write_config(
        directory, dict(profiles), grace_s=grace_s, gateway_settings=gateway_settings
    )
    daemon = DaemonProcess(config, env=DAEMON_ENV)
    try:
        await daemon.start()
        yield daemon
    finally:
        await daemon.stop()


def logged(event_name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event.get("event") == event_name


def session_keys(data_dir: Path) -> set[str]:
    """The keys of every session the daemon stored (from each file's meta line)."""
    keys: set[str] = set()
    for path in data_dir.rglob("*.jsonl"):
        with path.open(encoding="utf-8") as lines:
            first = lines.readline()
        if first.strip():
            keys.add(str(json.loads(first).get("session_key", "")))
    return keys


def gaps_s(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(times)]


def no_repeats(texts: list[str]) -> bool:
    return all(earlier != later for earlier, later in itertools.pairwise(texts))
