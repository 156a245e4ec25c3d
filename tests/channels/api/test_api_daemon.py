"""The HTTP API channel through the real daemon subprocess."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.daemon import DaemonProcess, free_port, write_config
from tests.support.sse import streamed_events

pytestmark = pytest.mark.slow

TOKEN = "s3cret-token-for-tests"


def api_profile(port: int, *, token: str | None = None, delay_s: float = 0.0) -> str:
    auth = f"\n    auth_token: {token}" if token else ""
    return f"""\
agent: {{type: echo, delay_s: {delay_s}, pieces: 4}}
channels:
  - type: api
    port: {port}
    max_body_bytes: 2000{auth}
"""


class Api:
    def __init__(self, base_url: str, token: str | None = None) -> None:
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
        async with (
            aiohttp.ClientSession(headers=self.headers) as http,
            http.request(method, self.base_url + path, **kwargs) as response,
        ):
            return response.status, await response.json()

    async def chat(self, chat_id: str, content: str) -> tuple[int, dict[str, Any]]:
        return await self.request("POST", "/v1/chat", json={"chat_id": chat_id, "content": content})

    async def stream(self, chat_id: str, content: str) -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        body = {"chat_id": chat_id, "content": content, "stream": True}
        async with (
            aiohttp.ClientSession(headers=self.headers) as http,
            http.post(self.base_url + "/v1/chat", json=body) as response,
        ):
            assert response.status == 200
            assert response.content_type == "text/event-stream"
            async for kind, data in streamed_events(response):
                events.append((kind, data["text"]))
        return events


async def start(tmp_path: Path, profile: str) -> DaemonProcess:
    daemon = await DaemonProcess(write_config(tmp_path, {"web": profile})).start()
    await daemon.wait_log(lambda event: event.get("event") == "api.web_chat_ready")
    return daemon


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    port = free_port()
    daemon = await start(tmp_path, api_profile(port, delay_s=0.05))
    try:
        yield Api(f"http://127.0.0.1:{port}")
    finally:
        await daemon.stop()


async def test_plain_chat_answers_with_json(api: Api) -> None:
    status, body = await api.chat("alice", "hello api")
    assert status == 200
    assert body == {"reply": "hello api", "chat_id": "alice", "session": "web:api:alice"}


async def test_streamed_chat_grows_snapshots_then_done(api: Api) -> None:
    text = "one two three four five six seven eight"
    events = await api.stream("bob", text)
    kinds = [kind for kind, _text in events]
    assert kinds[-1] == "done"
    assert set(kinds[:-1]) <= {"snapshot"}
    assert events[-1][1] == text
    snapshots = [snapshot for kind, snapshot in events if kind == "snapshot"]
    assert all(text.startswith(snapshot) for snapshot in snapshots)
    assert len(snapshots) >= 2


async def test_sessions_and_messages_are_listed(api: Api) -> None:
    await api.chat("carol", "first")
    await api.chat("carol", "second")
    status, body = await api.request("GET", "/v1/sessions")
    assert status == 200
    (session,) = [s for s in body["sessions"] if s["chat_id"] == "carol"]
    assert session["key"] == "web:api:carol"
    assert session["messages"] == 4
    status, body = await api.request("GET", "/v1/sessions/carol/messages")
    assert status == 200
    contents = [(m["role"], m["content"]) for m in body["messages"]]
    assert contents == [
        ("user", "first"),
        ("assistant", "first"),
        ("user", "second"),
        ("assistant", "second"),
    ]


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        (b"not json at all", "not valid JSON"),
        (b'{"content": "hi"}', "missing field 'chat_id'"),
        (b'{"chat_id": 7, "content": "hi"}', "must be a str"),
        (b'{"chat_id": "a", "content": "hi", "stream": "yes"}', "must be a bool"),
        (b'["a list"]', "must be a JSON object"),
        (b'{"chat_id": "a", "content": "' + b"x" * 3000 + b'"}', "limit"),
        (b'{"chat_id": "a", "content": "hi", "colour": 1}', "unknown field"),
    ],
)
async def test_bad_bodies_get_400_with_a_reason(api: Api, raw: bytes, complaint: str) -> None:
    status, body = await api.request(
        "POST", "/v1/chat", data=raw, headers={"Content-Type": "application/json"}
    )
    assert status == (413 if complaint == "limit" else 400)
    assert complaint in body["error"]
    assert "Traceback" not in body["error"]


async def test_commands_and_abort_work_over_http(api: Api) -> None:
    status, body = await api.chat("dave", "/help")
    assert status == 200
    assert "/new" in body["reply"]
    _status, body = await api.chat("dave", "/new research")
    assert "research" in body["reply"]
    _status, body = await api.chat("dave", "abort")
    assert body["reply"] == "🛑 Cancelled."


async def test_auth_token_is_required_when_configured(tmp_path: Path) -> None:
    port = free_port()
    daemon = await start(tmp_path, api_profile(port, token=TOKEN))
    base = f"http://127.0.0.1:{port}"
    try:
        status, body = await Api(base).chat("eve", "hi")
        assert status == 401
        assert "token" in body["error"]
        status, _body = await Api(base, "wrong-token").chat("eve", "hi")
        assert status == 401
        status, body = await Api(base, TOKEN).chat("eve", "hi")
        assert (status, body["reply"]) == (200, "hi")
        status, _body = await Api(base).request("GET", "/v1/sessions")
        assert status == 401
        async with aiohttp.ClientSession() as http, http.get(base + "/") as page:
            assert page.status == 200  # the page is public; it asks for the token
    finally:
        await daemon.stop()


async def test_client_disconnect_mid_stream_still_completes_and_stores(tmp_path: Path) -> None:
    port = free_port()
    daemon = await start(tmp_path, api_profile(port, delay_s=0.5))
    api = Api(f"http://127.0.0.1:{port}")
    text = "this reply keeps going after the client has left"
    try:
        body = {"chat_id": "frank", "content": text, "stream": True}
        async with aiohttp.ClientSession() as http:
            response = await http.post(api.base_url + "/v1/chat", json=body)
            first = await response.content.readline()
            assert first.startswith(b"event: snapshot")
            response.close()  # drop the connection mid-stream
        await daemon.wait_log(lambda e: e.get("event") == "turn.done")
        _status, stored = await api.request("GET", "/v1/sessions/frank/messages")
        assert [m["content"] for m in stored["messages"]] == [text, text]
        # The daemon is still answering afterwards.
        status, reply = await asyncio.wait_for(api.chat("frank", "still there?"), 30)
        assert (status, reply["reply"]) == (200, "still there?")
    finally:
        await daemon.stop()
