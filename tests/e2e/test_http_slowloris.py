"""Connection exhaustion through the daemon subprocess: a bounded slowloris on both listeners.

Each listener has a lowered connection cap and header timeout. Slow clients beyond the cap are
answered 503 at once, the ones inside it are cut off with 408 when their headers are late, the
other listener answers all along, and the attacked one answers again once they are gone.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.conftest import DAEMON_ENV
from tests.support.daemon import DaemonProcess, free_port, write_config

pytestmark = pytest.mark.slow

CAP = 20
ATTACKERS = 60
HEADER_TIMEOUT_S = 1.5
#: Every slow connection must have been answered within this (a bound, not a wait).
ANSWERED_WITHIN_S = HEADER_TIMEOUT_S + 10.0
LIMITS = (
    f"{{header_timeout_s: {HEADER_TIMEOUT_S}, max_connections: {CAP}, "
    "accept_error_interval_s: 60, keepalive_timeout_s: 2}"
)


def profile(port: int) -> str:
    return f"""\
agent: {{type: echo}}
channels:
  - type: api
    port: {port}
    limits: {LIMITS}
"""


#: What a slow client saw when the server reset its connection: beyond the cap, once as many
#: turned-away connections linger half-open as the cap allows, the rest are closed at once.
RESET = b"HTTP/1.1 RESET"


async def slow_client(port: int) -> bytes:
    """Connect and send half a request's headers, then nothing: what the server answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        await writer.drain()
        return await reader.read()  # until the server closes the connection
    except ConnectionResetError:
        return RESET
    finally:
        writer.close()


async def get_status(url: str) -> int:
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(url) as response:
        return response.status


@pytest.mark.parametrize("target", ["health", "api"])
async def test_a_slowloris_is_turned_away_and_cut_off_while_the_other_listener_answers(
    tmp_path: Path, target: str
) -> None:
    api_port = free_port()
    config = write_config(tmp_path, {"web": profile(api_port)}, http_settings=f", limits: {LIMITS}")
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    try:
        await daemon.wait_log(lambda e: e.get("event") == "api.web_chat_ready")
        health_port = int(daemon.http_url.rsplit(":", 1)[1])
        attacked, other = (
            (health_port, f"http://127.0.0.1:{api_port}/")
            if target == "health"
            else (api_port, daemon.http_url + "/healthz")
        )
        attack = [asyncio.create_task(slow_client(attacked)) for _ in range(ATTACKERS)]
        # Those beyond the cap are answered 503 at once, while the others still hang on.
        done, _pending = await asyncio.wait(attack, return_when=asyncio.FIRST_COMPLETED)
        assert next(iter(done)).result().split(b" ")[1] in (b"503", b"RESET")
        assert await get_status(other) == 200
        async with asyncio.timeout(ANSWERED_WITHIN_S):
            answers = await asyncio.gather(*attack)
        statuses = sorted(answer.split(b" ", 2)[1] for answer in answers)
        assert statuses.count(b"503") >= CAP  # at least as many as may linger
        assert statuses.count(b"503") + statuses.count(b"RESET") >= ATTACKERS - CAP
        assert statuses.count(b"408") >= 1
        assert set(statuses) <= {b"408", b"503", b"RESET"}
        # The attacked listener answers again, and the floods were logged in a few lines.
        url = (
            daemon.http_url + "/healthz" if target == "health" else f"http://127.0.0.1:{api_port}/"
        )
        assert await get_status(url) == 200
        assert 1 <= daemon.count_logged("http.connections_refused") <= 2
        assert 1 <= daemon.count_logged("http.header_timeout") <= 2
    finally:
        await daemon.stop()
