"""The connection guard on a real aiohttp server on 127.0.0.1, driven by raw sockets and aiohttp.

The slowloris itself runs through the daemon (tests/e2e/test_http_slowloris.py); these cover
the limits a daemon test would need minutes or huge bodies for.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
import structlog
from aiohttp import web
from structlog.testing import capture_logs

from channels.web.guard import (
    ACCEPT_FAILED,
    ConnectionGuard,
    GuardedSite,
    IntervalLog,
    effective_max_connections,
    guarded_runner,
    install_accept_error_log,
)
from config.http_limits import HttpLimitsConfig

MAX_BODY = 1000
REPO_ROOT = Path(__file__).resolve().parents[2]


async def echo_length(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response({"bytes": len(body)})


@pytest.fixture
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, ConnectionGuard]]:
    limits = HttpLimitsConfig(**getattr(request, "param", {}))
    guard = ConnectionGuard(limits, "test", MAX_BODY)
    app = web.Application(middlewares=[guard.middleware], client_max_size=MAX_BODY)
    app.router.add_post("/echo", echo_length)
    app.router.add_get("/echo", echo_length)
    runner = guarded_runner(app, guard)
    await runner.setup()
    await GuardedSite(runner, "127.0.0.1", 0, guard).start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", guard
    finally:
        await runner.cleanup()


async def test_a_body_is_read_whole_before_the_handler(
    served: tuple[str, ConnectionGuard],
) -> None:
    url, _guard = served
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/echo", data=b"x" * MAX_BODY) as response:
            assert (response.status, await response.json()) == (200, {"bytes": MAX_BODY})
        async with http.post(url + "/echo", data=b"x" * (MAX_BODY + 1)) as response:
            assert response.status == 413
            assert "limit of 1000 bytes" in (await response.json())["error"]


@pytest.mark.parametrize("served", [{"body_timeout_s": 0.3}], indirect=True)
async def test_a_slow_body_is_answered_408(served: tuple[str, ConnectionGuard]) -> None:
    url, _guard = served
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nabc")
    await writer.drain()
    async with asyncio.timeout(5):
        answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"the body took longer than 0.3 s" in answer


@pytest.mark.parametrize("served", [{"max_requests_per_connection": 2}], indirect=True)
async def test_a_kept_alive_connection_closes_after_its_request_limit(
    served: tuple[str, ConnectionGuard],
) -> None:
    url, _guard = served
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.get(url + "/echo") as first:
            assert first.headers.get("Connection", "keep-alive").lower() == "keep-alive"
        async with http.get(url + "/echo") as second:
            assert second.headers["Connection"].lower() == "close"
        async with http.get(url + "/echo") as third:
            assert third.status == 200


@pytest.mark.parametrize("served", [{"keepalive_timeout_s": 0.3}], indirect=True)
async def test_an_idle_kept_alive_connection_is_closed(
    served: tuple[str, ConnectionGuard],
) -> None:
    url, guard = served
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    async with asyncio.timeout(5):
        answer = await reader.read()  # the answer, then EOF once idle too long
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200")
    assert guard.timeouts.total == 0  # idle is not a header timeout


@pytest.fixture
def low_fd_limit() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
    try:
        yield 200
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_cap_stays_below_the_open_file_limit(low_fd_limit: int) -> None:
    assert effective_max_connections(10) == 10
    assert effective_max_connections(10_000) == low_fd_limit // 4
    with capture_logs() as logs:
        guard = ConnectionGuard(HttpLimitsConfig(max_connections=10_000), "api", MAX_BODY)
    assert guard.max_connections == 50
    assert [entry["event"] for entry in logs] == ["http.connection_cap_lowered"]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_interval_log_writes_one_line_per_interval_with_the_count() -> None:
    clock = Clock()
    with capture_logs() as logs:
        flood = IntervalLog("x.flood", 10.0, structlog.get_logger("test"), clock)
        for _ in range(500):
            flood.note(listener="api")
        clock.now = 10.5
        flood.note(listener="api")
    assert [(entry["event"], entry["count"]) for entry in logs] == [
        ("x.flood", 1),
        ("x.flood", 500),
    ]
    assert flood.total == 501


async def test_accept_errors_are_logged_once_per_interval_and_others_pass_on() -> None:
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    passed_on: list[str] = []
    loop.set_exception_handler(lambda _loop, context: passed_on.append(context["message"]))
    try:
        handler = install_accept_error_log(loop, 60.0)
        assert install_accept_error_log(loop, 60.0) is handler  # installed once
        with capture_logs() as logs:
            for _ in range(1000):
                loop.call_exception_handler(
                    {"message": ACCEPT_FAILED, "exception": OSError(24, "Too many open files")}
                )
            loop.call_exception_handler({"message": "something else"})
        assert [entry["event"] for entry in logs] == ["http.accept_failed"]
        assert handler.errors.total == 1000
        assert passed_on == ["something else"]
    finally:
        loop.set_exception_handler(previous)


async def test_a_listener_out_of_file_descriptors_logs_its_accept_errors_once() -> None:
    """A real EMFILE in a child process: asyncio reports every failed accept; one line."""
    root = REPO_ROOT
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.accept_flood",
        "3",
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    clients: list[asyncio.StreamWriter] = []
    try:
        async with asyncio.timeout(30):
            port = int(await child.stdout.readline())
            for _ in range(10):
                try:
                    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
                except (ConnectionRefusedError, ConnectionResetError):
                    # It has seen enough failures and stopped listening (a connect racing the
                    # close is reset rather than refused).
                    break
                clients.append(writer)
            out, err = await child.communicate()
    finally:
        for writer in clients:
            writer.close()
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert child.returncode == 0, err.decode()
    # asyncio retries the accept many times a second, reporting each failure ...
    assert int(out.decode().strip().removeprefix("accept failures: ")) >= 3
    # ... and they are one line.
    lines = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    failed = [line for line in lines if line["event"] == "http.accept_failed"]
    assert len(failed) == 1
    assert "Too many open files" in failed[0]["error"]
