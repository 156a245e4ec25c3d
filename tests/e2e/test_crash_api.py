"""Chaos through the HTTP API: clients that retry with the same `client_message_id`.

Each client sends its messages one after another and, when a request fails (the daemon was
SIGKILLed under it, refused it, or is restarting), sends it again with the same
`client_message_id` until it is answered. The daemon is killed several times meanwhile. At the
end every request got its own echo, and each session holds every message exactly once, in
order: a retry is never a second turn.
"""

from __future__ import annotations

import asyncio
import random
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.conftest import DAEMON_ENV
from tests.support.daemon import DaemonProcess, free_port, write_config

pytestmark = pytest.mark.slow

CLIENTS = 8
MESSAGES_PER_CLIENT = 20
KILLS = 3
GIVE_UP_S = 90.0


def profile(port: int) -> str:
    return f"""\
queue_mode: followup
agent: {{type: echo, delay_s: 0.1, pieces: 2}}
channels:
  - type: api
    port: {port}
"""


async def post_until_answered(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GIVE_UP_S
    while loop.time() < deadline:
        try:
            async with http.post(url, json=body, timeout=aiohttp.ClientTimeout(total=20)) as r:
                if r.status == 200:
                    reply: dict[str, Any] = await r.json()
                    if "error" not in reply:
                        return reply
        except (aiohttp.ClientError, TimeoutError):
            pass  # killed under us, or not listening yet: the same request again
        await asyncio.sleep(0.05)
    raise AssertionError(f"never answered: {body}")


async def test_retried_requests_are_answered_once_across_sigkills(tmp_path: Path) -> None:
    chooser = random.Random(7)
    port = free_port()
    config = write_config(tmp_path, {"main": profile(port)}, http_port=free_port())
    url = f"http://127.0.0.1:{port}/v1/chat"
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    replies: dict[str, list[str]] = {}

    async def client(number: int, http: aiohttp.ClientSession) -> None:
        chat = f"client-{number}"
        replies[chat] = []
        for index in range(MESSAGES_PER_CLIENT):
            text = f"{chat} says {index:02d}"
            body = {"chat_id": chat, "content": text, "client_message_id": f"{chat}-{index}"}
            answer = await post_until_answered(http, url, body)
            replies[chat].append(str(answer["reply"]))

    try:
        async with aiohttp.ClientSession() as http:
            clients = [
                asyncio.create_task(client(n, http), name=f"client-{n}") for n in range(CLIENTS)
            ]
            for _kill in range(KILLS):
                await asyncio.sleep(chooser.uniform(0.5, 1.5))
                daemon.signal(signal.SIGKILL)
                await daemon.wait()
                daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
            await asyncio.gather(*clients)
            # The last restart may have come after the clients were done: its API listens
            # only once the profile is up, a moment after the health server.
            await daemon.wait_log(lambda event: event.get("event") == "api.web_chat_ready")
            for number in range(CLIENTS):
                chat = f"client-{number}"
                expected = [f"{chat} says {index:02d}" for index in range(MESSAGES_PER_CLIENT)]
                assert replies[chat] == expected
                async with http.get(f"http://127.0.0.1:{port}/v1/sessions/{chat}/messages") as r:
                    stored = (await r.json())["messages"]
                users = [m["content"] for m in stored if m["role"] == "user"]
                assistants = [m["content"] for m in stored if m["role"] == "assistant"]
                assert users == expected, f"{chat}: a retry became a second turn"
                assert assistants == expected
    finally:
        await daemon.stop()
