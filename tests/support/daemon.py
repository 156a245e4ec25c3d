"""Start the real daemon as a subprocess from a temporary config, for end-to-end tests."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import sys
import textwrap
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 30.0
LOG_LINE_LIMIT_BYTES = 2**24


#: Ports handed out for a daemon to bind later: below the kernel's ephemeral range (32768 and
#: up on Linux), where every outgoing connection and every `bind(0)` takes its port, and each
#: pytest-xdist worker in a block of its own, so no other test can take one in the meantime.
#: `OCTOS_TEST_PORTS=FIRST-LAST` narrows the range, for two suites run side by side.
_RANGE_FIRST, _RANGE_LAST = (
    int(bound) for bound in os.environ.get("OCTOS_TEST_PORTS", "20000-31999").split("-")
)
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_PORT_BLOCK = (_RANGE_LAST + 1 - _RANGE_FIRST) // max(1, _WORKERS)
_FIRST_PORT = _RANGE_FIRST + _PORT_BLOCK * int(
    os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0
)
_next_ports = itertools.cycle(range(_FIRST_PORT, _FIRST_PORT + _PORT_BLOCK))


def free_port() -> int:
    """A port free now, for a server that binds it later (a daemon's config names it)."""
    for port in itertools.islice(_next_ports, _PORT_BLOCK):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_FIRST_PORT}-{_FIRST_PORT + _PORT_BLOCK - 1}")


def write_config(
    directory: Path,
    profiles: dict[str, str],
    *,
    grace_s: float = 10.0,
    http_port: int = 0,
    http_settings: str = "",
    gateway_settings: str = "",
) -> Path:
    """gateway.yaml plus one YAML file per profile (given as YAML text); `gateway_settings`:
    more top-level lines of gateway.yaml."""
    (directory / "profiles").mkdir(parents=True, exist_ok=True)
    for name, text in profiles.items():
        (directory / "profiles" / f"{name}.yaml").write_text(textwrap.dedent(text))
    config = directory / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            data_dir: data
            profiles_dir: profiles
            http: {{host: 127.0.0.1, port: {http_port or free_port()}{http_settings}}}
            logging: {{level: debug, format: json}}
            shutdown_grace_s: {grace_s}
            """
        )
        + textwrap.dedent(gateway_settings)
    )
    return config


class DaemonProcess:
    """`python -m gateway run -c CONFIG`, with its JSON log lines readable as events."""

    def __init__(self, config: Path, *extra_args: str, env: dict[str, str] | None = None) -> None:
        self.config = config
        self._args = extra_args
        self._env = env or {}
        self.process: asyncio.subprocess.Process | None = None
        self.logs: list[dict[str, Any]] = []
        self._log_event = asyncio.Condition()
        self._reader: asyncio.Task[None] | None = None
        #: Set once stderr closed (the daemon exited): a wait for a log line ends there.
        self._logs_ended = False
        self.http_url = ""

    async def start(self) -> DaemonProcess:
        self._logs_ended = False
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **self._env}
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway",
            "run",
            "-c",
            str(self.config),
            *self._args,
            cwd=self.config.parent,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # A log line may quote a large request (a signed webhook's form); with the default
            # 64 KiB line limit the reader would die and the daemon block on a full pipe.
            limit=LOG_LINE_LIMIT_BYTES,
        )
        self._reader = asyncio.create_task(self._read_logs(), name="daemon-log-reader")
        listening = await self.wait_log(lambda e: e.get("event") == "daemon.listening")
        self.http_url = str(listening["url"])
        return self

    async def _read_logs(self) -> None:
        assert self.process is not None
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            line = raw.decode(errors="replace").strip()
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                event = {"event": line, "raw": True}
            async with self._log_event:
                self.logs.append(event)
                self._log_event.notify_all()
        # A daemon that quits right after its last line (a config `check` refuses) must fail a
        # waiting test with that line now, not with a bare timeout later.
        async with self._log_event:
            self._logs_ended = True
            self._log_event.notify_all()

    async def wait_log(self, matches: Any, timeout_s: float = WAIT_S) -> dict[str, Any]:
        """The first log event (seen so far or later) for which `matches(event)` is true."""

        async def find() -> dict[str, Any]:
            async with self._log_event:
                seen = 0
                while True:
                    for event in self.logs[seen:]:
                        if matches(event):
                            return event
                    seen = len(self.logs)
                    exited = self.process is not None and self.process.returncode is not None
                    if exited or self._logs_ended:
                        raise AssertionError(f"daemon exited; logs: {self.logs[-20:]}")
                    await self._log_event.wait()

        return await asyncio.wait_for(find(), timeout_s)

    def count_logged(self, event_name: str) -> int:
        return sum(1 for event in self.logs if event.get("event") == event_name)

    async def wait_logged(self, event_name: str, *, more_than: int) -> None:
        """Wait until the daemon has logged `event_name` more than `more_than` times."""
        await self.wait_log(lambda _event: self.count_logged(event_name) > more_than)

    async def get(self, path: str) -> tuple[int, str]:
        async with aiohttp.ClientSession() as http, http.get(self.http_url + path) as response:
            return response.status, await response.text()

    async def metric(self, name: str, **labels: str) -> float:
        """The value of one sample on the daemon's /metrics (0 when it was never counted)."""
        status, body = await self.get("/metrics")
        assert status == 200, body
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return 0.0

    async def rate_limited_retries(self, channel: str) -> float:
        """How often the daemon has waited out a platform's rate limit on `channel` so far."""
        return await self.metric("octos_send_retries_total", channel=channel, reason="rate_limited")

    def signal(self, signum: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    async def wait(self, timeout_s: float = WAIT_S) -> int:
        assert self.process is not None
        code = await asyncio.wait_for(self.process.wait(), timeout_s)
        if self._reader is not None:
            await self._reader
        return code

    async def stop_cleanly(self) -> int:
        """SIGTERM, then the exit status once the daemon has shut down."""
        self.signal(signal.SIGTERM)
        return await self.wait(WAIT_S)

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        if self._reader is not None:
            await self._reader
