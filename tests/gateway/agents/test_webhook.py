"""The webhook agent against a fake endpoint: JSON, SSE, NDJSON and text replies; failures."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from bus import Message, TokenUsage
from config import WebhookAgentConfig
from gateway.agents import (
    SIGNATURE_HEADER,
    AgentError,
    AgentFailure,
    SnapshotPacing,
    WebhookAgent,
    create_agent,
    verify_signature,
)
from tests.fakes import LocalHttpServer
from tests.fakes.webhook_server import DEFAULT_REPLY, FakeWebhook, ReplyMode, ScriptedReply
from tests.gateway.agents.conftest import SnapshotRecorder, cancel_mid_stream, make_turn

SECRET = "webhook-signing-secret"
TOKEN = "Bearer hook-token-123"


@pytest.fixture
async def fake() -> AsyncIterator[FakeWebhook]:
    async with FakeWebhook() as server:
        yield server


def make_agent(url: str, **overrides: Any) -> WebhookAgent:
    settings: dict[str, Any] = {"url": url}
    settings.update(overrides)
    return WebhookAgent(
        WebhookAgentConfig.model_validate(settings), snapshots=SnapshotPacing(interval_s=0.0)
    )


async def test_posts_the_turn_and_takes_a_json_reply(
    fake: FakeWebhook, recorder: SnapshotRecorder
) -> None:
    fake.script(ScriptedReply(text="the answer", usage={"input_tokens": 3, "output_tokens": 2}))
    history = [Message.user("earlier"), Message.assistant("reply")]
    async with make_agent(fake.url, headers={"Authorization": TOKEN, "X-Plain": "yes"}) as agent:
        reply = await agent.run(make_turn("hello there", history), recorder)
    assert reply.content == "the answer"
    assert reply.usage == TokenUsage(input_tokens=3, output_tokens=2)
    assert recorder.snapshots == ["the answer"]
    [post] = fake.requests
    assert post.headers["Content-Type"] == "application/json"
    assert post.headers["Authorization"] == TOKEN
    assert post.headers["X-Plain"] == "yes"
    assert SIGNATURE_HEADER not in post.headers
    body = post.json
    assert body["profile"] == "work"
    assert body["session_key"] == "work:telegram:42"
    assert body["message"]["role"] == "user"
    assert body["message"]["content"] == "hello there"
    assert [(m["role"], m["content"]) for m in body["history"]] == [
        ("user", "earlier"),
        ("assistant", "reply"),
    ]


async def test_signature_header_is_the_hmac_of_the_exact_body(
    fake: FakeWebhook, recorder: SnapshotRecorder
) -> None:
    async with make_agent(fake.url, secret=SECRET) as agent:
        await agent.run(make_turn("sign me, 署名"), recorder)
    [post] = fake.requests
    expected = hmac.new(SECRET.encode(), post.body, hashlib.sha256).hexdigest()
    assert post.headers[SIGNATURE_HEADER] == f"sha256={expected}"
    assert verify_signature(SECRET, post.body, post.headers[SIGNATURE_HEADER])
    assert not verify_signature("another secret", post.body, post.headers[SIGNATURE_HEADER])
    assert not verify_signature(SECRET, post.body + b" ", post.headers[SIGNATURE_HEADER])


@pytest.mark.parametrize("mode", ["sse", "ndjson"])
async def test_streamed_reply_grows_snapshot_by_snapshot(
    fake: FakeWebhook, recorder: SnapshotRecorder, mode: ReplyMode
) -> None:
    fake.script(ScriptedReply(mode=mode, text="one two three", usage={"output_tokens": 3}))
    async with make_agent(fake.url) as agent:
        reply = await agent.run(make_turn(), recorder)
    assert reply.content == "one two three"
    assert recorder.snapshots == ["one", "one two", "one two three"]
    assert reply.usage == TokenUsage(output_tokens=3)


async def test_sse_without_done_is_accepted_when_the_body_ends_cleanly(
    fake: FakeWebhook, recorder: SnapshotRecorder
) -> None:
    fake.script(ScriptedReply(mode="sse", text="no done marker", omit_done=True))
    async with make_agent(fake.url) as agent:
        reply = await agent.run(make_turn(), recorder)
    assert reply.content == "no done marker"


async def test_plain_text_reply(fake: FakeWebhook, recorder: SnapshotRecorder) -> None:
    fake.script(ScriptedReply(mode="text", text="just text, ünïcode"))
    async with make_agent(fake.url) as agent:
        reply = await agent.run(make_turn(), recorder)
    assert reply.content == "just text, ünïcode"
    assert reply.usage == TokenUsage()


async def test_server_error_is_an_agent_error_and_not_retried(
    fake: FakeWebhook, recorder: SnapshotRecorder
) -> None:
    fake.script(ScriptedReply(status=500, error_body=f"crashed while using {TOKEN}"))
    async with make_agent(fake.url, headers={"Authorization": TOKEN}) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    error = caught.value
    assert error.failure is AgentFailure.UNAVAILABLE
    assert error.status == 500
    assert "HTTP 500" in str(error)
    assert "crashed while using ***" in str(error)
    assert TOKEN not in str(error)
    assert "500" not in error.user_message
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("status", "failure"),
    [
        (429, AgentFailure.RATE_LIMITED),
        (401, AgentFailure.AUTH),
        (404, AgentFailure.MISCONFIGURED),
        (302, AgentFailure.MISCONFIGURED),
        (422, AgentFailure.REJECTED),
        (504, AgentFailure.TIMEOUT),
    ],
)
async def test_error_statuses_map_to_failures(
    fake: FakeWebhook, recorder: SnapshotRecorder, status: int, failure: AgentFailure
) -> None:
    fake.script(ScriptedReply(status=status))
    async with make_agent(fake.url) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    assert caught.value.failure is failure
    assert caught.value.status == status


async def test_mid_stream_disconnect_is_an_agent_error(
    fake: FakeWebhook, recorder: SnapshotRecorder
) -> None:
    fake.script(ScriptedReply(mode="sse", text="one two three four", disconnect_after=2))
    async with make_agent(fake.url) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    assert caught.value.failure is AgentFailure.INTERRUPTED
    assert recorder.snapshots == ["one", "one two"]


async def test_error_event_in_the_stream_fails_the_turn(recorder: SnapshotRecorder) -> None:
    body = b'data: {"text": "par"}\n\ndata: {"error": "model crashed"}\n\n'
    async with serve_raw(body, "text/event-stream") as url, make_agent(url) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    assert caught.value.failure is AgentFailure.UNAVAILABLE
    assert "model crashed" in str(caught.value)


async def test_cancellation_mid_stream_releases_the_connection(
    fake: FakeWebhook, recorder: SnapshotRecorder
) -> None:
    fake.script(ScriptedReply(mode="sse", text="one two three", hold_after=1))
    async with make_agent(fake.url) as agent:
        await cancel_mid_stream(agent, recorder, fake.control, shown=1, name="webhook-turn")
        reply = await agent.run(make_turn(), SnapshotRecorder())
    assert recorder.snapshots == ["one"]
    assert reply.content == DEFAULT_REPLY


async def test_no_answer_within_the_timeout(fake: FakeWebhook, recorder: SnapshotRecorder) -> None:
    fake.script(ScriptedReply(mode="ndjson", hold_after=0))
    async with make_agent(fake.url, timeout_s=0.2) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    assert caught.value.failure is AgentFailure.TIMEOUT


async def test_unreachable_url_hides_its_query_from_the_log(recorder: SnapshotRecorder) -> None:
    async with FakeWebhook() as gone:
        url = f"{gone.url}?token=query-secret"
    async with make_agent(url) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    assert caught.value.failure is AgentFailure.UNAVAILABLE
    assert "query-secret" not in str(caught.value)
    assert "/hook" in str(caught.value)


@asynccontextmanager
async def serve_raw(body: bytes, content_type: str) -> AsyncIterator[str]:
    """A one-route server answering every POST with `body` as `content_type`; yields its URL."""

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_post("/", answer)
    async with LocalHttpServer(app) as server:
        yield f"{server.origin}/"


@pytest.mark.parametrize(
    ("body", "content_type", "detail"),
    [
        (b'{"answer": "wrong key"}', "application/json", "expected {'reply'"),
        (b"not json", "application/json", "expected {'reply'"),
        (b"<html>hi</html>", "text/html", "unsupported reply Content-Type 'text/html'"),
        (b'data: {"text": 5}\n\n', "text/event-stream", "not the expected JSON"),
        (b"data: \xff\xfe\n\n", "text/event-stream", "not UTF-8"),
    ],
)
async def test_unreadable_replies_are_bad_reply_errors(
    recorder: SnapshotRecorder, body: bytes, content_type: str, detail: str
) -> None:
    async with serve_raw(body, content_type) as url, make_agent(url) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    assert caught.value.failure is AgentFailure.BAD_REPLY
    assert detail in str(caught.value)


async def test_reply_larger_than_the_cap_is_refused(recorder: SnapshotRecorder) -> None:
    body = json.dumps({"reply": "x" * 5000}).encode()
    async with serve_raw(body, "application/json") as url:
        config = WebhookAgentConfig(url=url)
        async with WebhookAgent(config, max_reply_bytes=1000) as agent:
            with pytest.raises(AgentError) as caught:
                await agent.run(make_turn(), recorder)
    assert caught.value.failure is AgentFailure.BAD_REPLY
    assert "larger than 1000 bytes" in str(caught.value)


async def test_create_agent_builds_a_webhook_agent(
    fake: FakeWebhook, recorder: SnapshotRecorder
) -> None:
    agent = create_agent(WebhookAgentConfig(url=fake.url))
    assert isinstance(agent, WebhookAgent)
    async with agent:
        reply = await agent.run(make_turn(), recorder)
    assert reply.content == DEFAULT_REPLY
    await agent.aclose()
    with pytest.raises(RuntimeError):
        await agent.run(make_turn(), recorder)
