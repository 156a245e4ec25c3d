"""Run `python -m gateway ...` as a subprocess without blocking the test's event loop."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.daemon import REPO_ROOT

CLI_TIMEOUT_S = 60.0
#: Loopback is never proxied, whatever the developer's environment says.
LOOPBACK_ENV = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@dataclass(frozen=True, slots=True)
class CliResult:
    code: int
    out: str
    err: str


async def started_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """`python -m gateway *args` started, its three streams piped: for a test that reads its
    output while it runs (`run_cli` waits for the end)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **LOOPBACK_ENV, **(env or {})},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: str | None = None
) -> CliResult:
    process = await started_cli(*args, cwd=cwd, env=env)
    data = stdin.encode() if stdin is not None else b""
    out, err = await asyncio.wait_for(process.communicate(data), CLI_TIMEOUT_S)
    assert process.returncode is not None
    return CliResult(process.returncode, out.decode(), err.decode())
