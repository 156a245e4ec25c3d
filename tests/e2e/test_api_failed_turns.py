"""A turn that cannot run is answered at once with a JSON error, never left hanging."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from bus import Message, SessionKey
from sessions import SessionStore
from tests.e2e.conftest import DAEMON_ENV, WAIT_S
from tests.support.daemon import DaemonProcess, free_port, write_config

pytestmark = pytest.mark.slow


async def future_session(root: Path, chat_id: str) -> None:
    """A session file written by a newer build (schema_version 99)."""
    key = SessionKey.for_chat("main", "api", chat_id)
    async with SessionStore(root) as store:
        await store.append(key, Message.user("written by a newer build"))
    await asyncio.to_thread(_bump_schema, root, chat_id)


def _bump_schema(root: Path, chat_id: str) -> None:
    (path,) = [p for p in root.rglob("*.jsonl") if chat_id in str(p)]
    head, *rest = path.read_text().splitlines(keepends=True)
    path.write_text(json.dumps({**json.loads(head), "schema_version": 99}) + "\n" + "".join(rest))


async def test_a_session_this_build_cannot_read_fails_the_turn_at_once(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, {"main": f"channels: [{{type: api, port: {port}}}]\n"})
    await future_session(tmp_path / "data" / "main", "future")
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    url = f"http://127.0.0.1:{port}/v1/chat"
    try:
        await daemon.wait_log(lambda e: e.get("event") == "api.web_chat_ready")
        timeout = aiohttp.ClientTimeout(total=WAIT_S)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            async with http.post(url, json={"chat_id": "future", "content": "hello?"}) as r:
                status, body = r.status, await r.json()
            assert status == 500
            assert "schema_version 99" in body["error"]
            streamed = {"chat_id": "future", "content": "and streamed?", "stream": True}
            async with http.post(url, json=streamed) as r:
                events = [line async for line in r.content if line.startswith(b"event:")]
            assert events[-1].strip() == b"event: error"
            # The chat next door is not affected.
            async with http.post(url, json={"chat_id": "fine", "content": "hi"}) as r:
                assert (r.status, (await r.json())["reply"]) == (200, "hi")
    finally:
        await daemon.stop()
