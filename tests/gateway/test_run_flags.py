"""`run --api-port/--http-port` on the embedded default, its visible streaming, a busy API port,
and a profile passed where gateway.yaml belongs."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from contextlib import aclosing
from pathlib import Path

import aiohttp
import pytest

from tests.support.cli import LOOPBACK_ENV, run_cli
from tests.support.daemon import REPO_ROOT, free_port, write_config
from tests.support.sse import streamed_events

pytestmark = pytest.mark.slow

WAIT_S = 30.0


async def snapshots_of(api_port: int, text: str) -> list[str]:
    """The texts of the `snapshot` events of one streamed reply."""
    texts: list[str] = []
    url = f"http://127.0.0.1:{api_port}/v1/chat"
    body = {"chat_id": "flags", "content": text, "stream": True}
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as response:
        assert response.status == 200
        async with aclosing(streamed_events(response)) as events:
            async for kind, data in events:
                if kind == "snapshot":
                    texts.append(data["text"])
                elif kind in ("done", "error"):
                    break
    return texts


async def test_the_embedded_default_on_other_ports_streams_visibly(tmp_path: Path) -> None:
    api_port, http_port = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "run",
        "--api-port", str(api_port), "--http-port", str(http_port),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **LOOPBACK_ENV},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(WAIT_S):
            # The web chat listens, and the start-up line comes once the profile has started:
            # in either order.
            while not all(
                any(event in line for line in lines)
                for event in ("api.web_chat_ready", "gateway.started")
            ):
                lines.append((await process.stderr.readline()).decode())
        started = next(line for line in lines if "gateway.started" in line)
        assert f"http://127.0.0.1:{http_port}/" in started
        assert f"http://127.0.0.1:{api_port}/" in started
        assert "Ctrl+C" in started

        text = "one two three four five six seven eight nine ten eleven twelve"
        shown = await snapshots_of(api_port, text)
        assert shown[-1] == text
        assert len(shown) >= 3, shown
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{http_port}/") as page,
        ):
            assert page.status == 200
            assert "octos-gateway status" in await page.text()
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(WAIT_S):
            rest = await process.stderr.read()
            assert await process.wait() == 0
        assert "Traceback" not in "".join(lines) + rest.decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_busy_api_port_exits_69_naming_the_flag(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        result = await run_cli(
            "run", "--api-port", str(busy), "--http-port", str(free_port()), cwd=tmp_path
        )
    assert result.code == 69
    assert f"127.0.0.1:{busy}" in result.err
    assert "--api-port" in result.err
    assert "Traceback" not in result.err


async def test_api_flags_need_exactly_one_api_channel(tmp_path: Path) -> None:
    two = {"a": "channels: [{type: api, port: 0}]\n", "b": "channels: [{type: api, port: 0}]\n"}
    config = write_config(tmp_path, two)
    result = await run_cli("run", "-c", str(config), "--api-port", "0", cwd=tmp_path)
    assert result.code == 2
    assert "need exactly one api channel, found 2" in result.err


async def test_a_profile_passed_as_gateway_yaml_is_named_as_such(tmp_path: Path) -> None:
    profile = REPO_ROOT / "examples" / "more" / "assistant.yaml"
    for command in ("check", "run"):
        result = await run_cli(command, "-c", str(profile), cwd=tmp_path)
        assert result.code == 2
        assert "this looks like a profile (one bot), not a gateway.yaml" in result.err
        assert "1 problem in the configuration" in result.err
