"""A process that holds a poller lease, for the takeover test and benchmark to SIGKILL.

`python -m bench.lease_holder URL PREFIX KEY HOLDER` waits for the lease, prints `polling` on
stdout once it holds it, and "polls" (waits) until killed. `HolderProcess` starts one and
reads that line, so a caller waits on the event rather than on time.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

import nats
import structlog

from gateway.cluster.lease import PollerLease, open_lease_bucket

POLLING = "polling"
#: Generous: a loaded machine may take seconds to start Python and connect.
START_TIMEOUT_S = 60.0


async def hold_forever(url: str, prefix: str, key: str, holder: str, ttl_s: float) -> None:
    connection = await nats.connect(url, connect_timeout=5)
    try:
        kv = await open_lease_bucket(connection.jetstream(), prefix)
        lease = PollerLease(kv, key, holder, ttl_s=ttl_s, renew_s=ttl_s / 5)

        async def poll() -> None:
            print(POLLING, flush=True)
            await asyncio.Event().wait()

        await lease.hold(poll)
    finally:
        await connection.close()


class HolderProcess:
    """One `bench.lease_holder` subprocess."""

    def __init__(
        self, url: str, prefix: str, key: str, holder: str, ttl_s: float, *, quiet: bool = False
    ) -> None:
        self._args = (url, prefix, key, holder, f"--ttl-s={ttl_s}")
        #: Its log (stderr) is dropped when quiet, e.g. under the benchmark's table.
        self._stderr = asyncio.subprocess.DEVNULL if quiet else None
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.lease_holder",
            *self._args,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr,
        )

    async def wait_polling(self) -> None:
        """Until the process holds the lease; raises if it exits first."""
        process = self._started()
        assert process.stdout is not None
        async with asyncio.timeout(START_TIMEOUT_S):
            line = await process.stdout.readline()
        if line.decode().strip() != POLLING:
            raise RuntimeError(f"lease holder ended before holding the lease: {line!r}")

    async def kill(self) -> None:
        """SIGKILL: no release, no goodbye; the lease must expire on its own."""
        process = self._started()
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)
        await process.wait()

    def _started(self) -> asyncio.subprocess.Process:
        if self._process is None:
            raise RuntimeError("HolderProcess.start() first")
        return self._process


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.lease_holder", description=__doc__)
    for name in ("url", "prefix", "key", "holder"):
        parser.add_argument(name)
    parser.add_argument("--ttl-s", type=float, default=5.0)
    args = parser.parse_args(argv)
    # stdout carries only the `polling` line; the lease's log goes to stderr.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    asyncio.run(hold_forever(args.url, args.prefix, args.key, args.holder, args.ttl_s))


if __name__ == "__main__":
    main()
