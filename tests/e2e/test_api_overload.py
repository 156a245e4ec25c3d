"""Overload through the HTTP API: pushed back at once with 429 / 503 and `Retry-After`, nothing
stored that was not accepted, and the daemon's memory back at its idle level after the burst.
"""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S
from tests.support.daemon import DaemonProcess, free_port, write_config

pytestmark = pytest.mark.slow

PER_CHAT = 4
TOTAL = 12
#: How far above its idle level the daemon's resident memory may stay after a burst.
MEMORY_SLACK_MB = 25


def profile(port: int, *, delay_s: float) -> str:
    return f"""\
queue_mode: followup
agent: {{type: echo, delay_s: {delay_s}, pieces: 2}}
sessions: {{max_backlog_per_chat: {PER_CHAT}, max_backlog: {TOTAL}}}
channels:
  - type: api
    port: {port}
"""


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with http.post(url, json=body) as response:
        return response.status, (response.headers.get("Retry-After"), await response.json())


async def started(tmp_path: Path, delay_s: float) -> tuple[DaemonProcess, int]:
    port = free_port()
    config = write_config(tmp_path, {"main": profile(port, delay_s=delay_s)})
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    await daemon.wait_log(lambda e: e.get("event") == "api.web_chat_ready")
    return daemon, port


async def test_a_full_chat_is_429_a_full_profile_503_and_nothing_refused_is_stored(
    tmp_path: Path,
) -> None:
    daemon, port = await started(tmp_path, delay_s=1.0)
    url = f"http://127.0.0.1:{port}/v1/chat"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as http:
            one_chat = [
                post(
                    http, url, {"chat_id": "busy", "content": f"m{n}", "client_message_id": f"b{n}"}
                )
                for n in range(3 * PER_CHAT)
            ]
            many_chats = [
                post(http, url, {"chat_id": f"c{n}", "content": "hi", "client_message_id": f"c{n}"})
                for n in range(3 * TOTAL)
            ]
            answers = await asyncio.gather(*one_chat, *many_chats)
            statuses = Counter(status for status, _ in answers)
            assert statuses[429] >= 2 * PER_CHAT - 1, statuses
            assert statuses[503] >= 1, statuses
            assert statuses[200] <= TOTAL, statuses
            assert set(statuses) <= {200, 429, 503}, statuses
            for status, (retry_after, body) in answers:
                if status in (429, 503):
                    assert retry_after is not None
                    assert int(retry_after) >= 1
                    assert "retry" in body["error"] or "waiting" in body["error"]
            async with http.get(f"http://127.0.0.1:{port}/v1/sessions/busy/messages") as r:
                stored = [m["content"] for m in (await r.json())["messages"] if m["role"] == "user"]
            accepted = [
                body["reply"] for (status, (_r, body)) in answers[: 3 * PER_CHAT] if status == 200
            ]
            # Exactly what was accepted was stored and answered; the refused left no trace.
            assert sorted(stored) == sorted(accepted)
            assert 1 <= len(stored) <= PER_CHAT
    finally:
        await daemon.stop()


async def test_memory_returns_to_its_idle_level_after_a_burst(tmp_path: Path) -> None:
    daemon, port = await started(tmp_path, delay_s=0.01)
    url = f"http://127.0.0.1:{port}/v1/chat"
    assert daemon.process is not None
    process = psutil.Process(daemon.process.pid)
    try:
        connector = aiohttp.TCPConnector(limit=100)
        timeout = aiohttp.ClientTimeout(total=WAIT_S)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

            async def burst(round_number: int) -> Counter[int]:
                answers = await asyncio.gather(
                    *(
                        post(http, url, {"chat_id": f"r{round_number}-{n % 50}", "content": "x"})
                        for n in range(600)
                    )
                )
                return Counter(status for status, _ in answers)

            await burst(0)  # warms every code path up: the idle level is measured after it
            gc.collect()
            idle_mb = process.memory_info().rss / 1e6
            for round_number in range(1, 4):
                statuses = await burst(round_number)
                assert set(statuses) <= {200, 429, 503}, statuses
            after_mb = process.memory_info().rss / 1e6
    finally:
        await daemon.stop()
    assert after_mb - idle_mb <= MEMORY_SLACK_MB, (idle_mb, after_mb)
