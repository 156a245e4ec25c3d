"""Cluster processes for the end-to-end tests: ingress and worker daemons on one config.

Every process of a test shares its gateway.yaml (the test's own stream prefix and database) and
gets its own health port (`--http-port 0`); ingress processes of the HTTP API each get their own
API port (`--api-port`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.e2e.conftest import DAEMON_ENV
from tests.e2e.telegram_profiles import polling_profile
from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import DaemonProcess, write_config
from tests.support.nats import NATS_URL


def cluster_config(
    directory: Path,
    profiles: dict[str, str],
    *,
    prefix: str,
    dsn: str,
    partitions: int = 8,
    ack_wait_s: float = 30.0,
    extra_nats: str = "",
    url: str = NATS_URL,
    http_settings: str = "",
) -> Path:
    """`url`: the shared test server unless a test runs NATS servers of its own;
    `http_settings`: more of gateway.yaml's `http:` (`, token: ...`)."""
    config = write_config(directory, profiles, http_settings=http_settings)
    with config.open("a", encoding="utf-8") as text:
        text.write(
            "bus:\n"
            "  backend: nats\n"
            f'  nats: {{url: "{url}", stream_prefix: {prefix}, partitions: {partitions}, '
            f"ack_wait_s: {ack_wait_s}, retry_backoff_s: [0.2]{extra_nats}}}\n"
            f'store: {{backend: postgres, dsn: "{dsn}"}}\n'
        )
    return config


def echo_on_telegram(
    directory: Path, fake: FakeTelegram, profile: str, user: int, **cluster: Any
) -> Path:
    """A cluster config of one profile: the echo agent, Telegram on the fake allowing `user`;
    `cluster` as `cluster_config` takes it (prefix, dsn, ...)."""
    profiles = {profile: polling_profile(fake, user, "{type: echo}")}
    return cluster_config(directory, profiles, **cluster)


async def start_role(
    config: Path, role: str, *extra: str, ready: str = "profile.started"
) -> DaemonProcess:
    """A process of `role`, once it has logged `ready` (its profiles started)."""
    daemon = DaemonProcess(config, "--role", role, "--http-port", "0", *extra, env=DAEMON_ENV)
    await daemon.start()
    await daemon.wait_log(lambda event: event.get("event") == ready)
    return daemon


@asynccontextmanager
async def processes() -> AsyncIterator[list[DaemonProcess]]:
    """Every process a test starts, killed on the way out if it left them running."""
    started: list[DaemonProcess] = []
    try:
        yield started
    finally:
        for daemon in started:
            await daemon.stop()
