"""The openai agent against a fake OpenAI server: the real SDK, real HTTP, real SSE."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bus import Message, TokenUsage
from config import OpenAIAgentConfig
from gateway.agents import (
    AgentError,
    AgentFailure,
    OpenAICompatAgent,
    SnapshotPacing,
    create_agent,
)
from gateway.agents.openai_compat import PLACEHOLDER_API_KEY, chat_messages
from tests.fakes.openai_server import DEFAULT_REPLY, FakeOpenAI, ScriptedCompletion
from tests.gateway.agents.conftest import SnapshotRecorder, cancel_mid_stream, make_turn

API_KEY = "sk-test-0123456789abcdef"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=API_KEY) as server:
        yield server


def agent_config(fake: FakeOpenAI, **overrides: Any) -> OpenAIAgentConfig:
    settings: dict[str, Any] = {
        "model": "fake-model",
        "base_url": fake.base_url,
        "api_key": API_KEY,
    }
    settings.update(overrides)
    return OpenAIAgentConfig.model_validate(settings)


def make_agent(fake: FakeOpenAI, *, max_retries: int = 2, **overrides: Any) -> OpenAICompatAgent:
    return OpenAICompatAgent(
        agent_config(fake, **overrides),
        max_retries=max_retries,
        snapshots=SnapshotPacing(interval_s=0.0),
    )


async def test_sends_system_prompt_history_and_user_message(
    fake: FakeOpenAI, recorder: SnapshotRecorder
) -> None:
    history = [
        Message.user("old question"),
        Message.assistant("old answer"),
        Message.user("recent question"),
        Message.assistant("recent answer"),
    ]
    async with make_agent(fake, system_prompt="Be brief.", max_history=2) as agent:
        await agent.run(make_turn("new question", history), recorder)
    [request] = fake.requests
    assert request.body["model"] == "fake-model"
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "recent question"},
        {"role": "assistant", "content": "recent answer"},
        {"role": "user", "content": "new question"},
    ]
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    assert "temperature" not in request.body
    assert "max_tokens" not in request.body


async def test_a_quoted_message_is_a_line_before_the_text(
    fake: FakeOpenAI, recorder: SnapshotRecorder
) -> None:
    quoted = {"message_id": "7", "text": "The refund is 42 euros.", "from": "bot"}
    turn = dataclasses.replace(make_turn("is that final?"), reply_to=quoted)
    async with make_agent(fake) as agent:
        await agent.run(turn, recorder)
    [request] = fake.requests
    assert request.body["messages"][-1] == {
        "role": "user",
        "content": '[replying to the bot: "The refund is 42 euros."]\nis that final?',
    }


async def test_sampling_parameters_are_sent_when_set(
    fake: FakeOpenAI, recorder: SnapshotRecorder
) -> None:
    async with make_agent(fake, temperature=0.2, max_tokens=64) as agent:
        await agent.run(make_turn(), recorder)
    assert fake.requests[0].body["temperature"] == 0.2
    assert fake.requests[0].body["max_tokens"] == 64


async def test_snapshots_grow_to_the_reply_and_usage_is_recorded(
    fake: FakeOpenAI, recorder: SnapshotRecorder
) -> None:
    fake.script(ScriptedCompletion(text="one two three four", cached_tokens=2, reasoning_tokens=7))
    async with make_agent(fake, system_prompt="Be brief.") as agent:
        reply = await agent.run(make_turn("hello there"), recorder)
    assert reply.content == "one two three four"
    assert recorder.snapshots == ["one", "one two", "one two three", "one two three four"]
    # The fake counts a token per prompt word ("Be brief." + "hello there") and per chunk.
    assert reply.usage == TokenUsage(
        input_tokens=4, output_tokens=4, reasoning_tokens=7, cache_read_tokens=2
    )


async def test_rate_limit_is_retried_after_retry_after(
    fake: FakeOpenAI, recorder: SnapshotRecorder
) -> None:
    fake.rate_limit(1, retry_after_s=0.01)
    async with make_agent(fake) as agent:
        reply = await agent.run(make_turn(), recorder)
    assert reply.content == DEFAULT_REPLY
    assert len(fake.requests) == 2


async def test_rate_limit_past_the_retries_is_an_agent_error(
    fake: FakeOpenAI, recorder: SnapshotRecorder
) -> None:
    fake.rate_limit(5, retry_after_s=0.01)
    async with make_agent(fake, max_retries=1) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    error = caught.value
    assert error.failure is AgentFailure.RATE_LIMITED
    assert error.status == 429
    assert "rate limited" in error.user_message
    assert len(fake.requests) == 2
    assert recorder.snapshots == []


async def test_wrong_key_is_an_auth_error_that_never_shows_the_key(
    fake: FakeOpenAI, recorder: SnapshotRecorder
) -> None:
    wrong_key = "sk-wrong-key-fedcba9876543210"
    async with make_agent(fake, api_key=wrong_key) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    error = caught.value
    assert error.failure is AgentFailure.AUTH
    assert "401" in str(error)
    assert "API key" in str(error)  # the suggestion says what to check
    for text in (str(error), error.user_message):
        assert wrong_key not in text
        assert API_KEY not in text
    assert "401" not in error.user_message
    assert len(fake.requests) == 1  # a refused key is not retried


async def test_a_key_echoed_by_the_server_is_masked_in_the_log_text(
    recorder: SnapshotRecorder,
) -> None:
    async with FakeOpenAI() as fake:
        fake.script(ScriptedCompletion(status=400, error_message=f"bad request for {API_KEY}"))
        async with make_agent(fake) as agent:
            with pytest.raises(AgentError) as caught:
                await agent.run(make_turn(), recorder)
    assert caught.value.failure is AgentFailure.REJECTED
    assert "bad request for ***" in str(caught.value)
    assert API_KEY not in str(caught.value)


async def test_without_a_key_a_placeholder_is_sent(recorder: SnapshotRecorder) -> None:
    async with FakeOpenAI() as fake, make_agent(fake, api_key=None) as agent:
        reply = await agent.run(make_turn(), recorder)
    assert reply.content == DEFAULT_REPLY
    assert fake.requests[0].headers["Authorization"] == f"Bearer {PLACEHOLDER_API_KEY}"


async def test_mid_stream_disconnect_is_an_agent_error(
    fake: FakeOpenAI, recorder: SnapshotRecorder
) -> None:
    fake.script(ScriptedCompletion(text="one two three four", disconnect_after=2))
    async with make_agent(fake) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    assert caught.value.failure is AgentFailure.INTERRUPTED
    assert "cut off" in caught.value.user_message
    assert recorder.snapshots == ["one", "one two"]
    assert len(fake.requests) == 1  # a reply already under way is not silently restarted


async def test_stream_without_finish_is_an_agent_error(
    fake: FakeOpenAI, recorder: SnapshotRecorder
) -> None:
    fake.script(ScriptedCompletion(text="half a", finish_reason=None))
    async with make_agent(fake) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    assert caught.value.failure is AgentFailure.INTERRUPTED


async def test_cancellation_mid_stream_releases_the_connection(
    fake: FakeOpenAI, recorder: SnapshotRecorder
) -> None:
    fake.script(ScriptedCompletion(text="one two three four", hold_after=2))
    async with make_agent(fake) as agent:
        await cancel_mid_stream(agent, recorder, fake.control, shown=2, name="openai-turn")
        # The agent still works after a cancelled turn.
        reply = await agent.run(make_turn(), SnapshotRecorder())
    assert recorder.snapshots == ["one", "one two"]
    assert reply.content == DEFAULT_REPLY
    assert fake.streams_completed == 1


async def test_a_failing_sink_is_not_mistaken_for_an_agent_error(fake: FakeOpenAI) -> None:
    class SinkFailed(Exception):
        pass

    async def failing_sink(text: str) -> None:
        raise SinkFailed(text)

    fake.script(ScriptedCompletion(text="one two three", hold_after=2))
    async with make_agent(fake) as agent:
        with pytest.raises(SinkFailed):
            await agent.run(make_turn(), failing_sink)
        # The stream was closed on the way out: the held response sees its client leave.
        await asyncio.wait_for(fake.control.client_disconnected.wait(), timeout=10)


async def test_concurrent_turns_share_one_agent(fake: FakeOpenAI) -> None:
    fake.script(ScriptedCompletion(text="first reply"), ScriptedCompletion(text="second reply"))
    async with make_agent(fake) as agent:
        replies = await asyncio.gather(
            agent.run(make_turn("a"), SnapshotRecorder()),
            agent.run(make_turn("b"), SnapshotRecorder()),
        )
    assert sorted(reply.content for reply in replies) == ["first reply", "second reply"]
    assert len(fake.requests) == 2


async def test_no_answer_within_the_timeout_is_a_timeout_error(
    fake: FakeOpenAI, recorder: SnapshotRecorder
) -> None:
    fake.script(ScriptedCompletion(hold_after=1))
    async with make_agent(fake, max_retries=0, timeout_s=0.2) as agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    assert caught.value.failure is AgentFailure.TIMEOUT
    assert "too long" in caught.value.user_message


async def test_unreachable_server_is_unavailable(recorder: SnapshotRecorder) -> None:
    async with FakeOpenAI() as gone:
        config = agent_config(gone)
    agent = OpenAICompatAgent(config, max_retries=0)
    async with agent:
        with pytest.raises(AgentError) as caught:
            await agent.run(make_turn(), recorder)
    assert caught.value.failure is AgentFailure.UNAVAILABLE
    assert "127.0.0.1" in str(caught.value)
    assert "127.0.0.1" not in caught.value.user_message


async def test_aclose_is_idempotent_and_final(fake: FakeOpenAI, recorder: SnapshotRecorder) -> None:
    agent = create_agent(agent_config(fake))
    assert isinstance(agent, OpenAICompatAgent)
    async with agent:
        await agent.run(make_turn(), recorder)
    await agent.aclose()
    with pytest.raises(RuntimeError):
        await agent.run(make_turn(), recorder)


def test_chat_messages_leave_out_tool_results_and_empty_messages() -> None:
    history = [
        Message.user("q"),
        Message(role="assistant", content=""),
        Message(role="tool", content="tool output", tool_call_id="call-1"),
        Message.system("summary of earlier talk"),
        Message.assistant("a"),
    ]
    messages = chat_messages(None, history, Message.user("now"), max_history=40)
    assert messages == [
        {"role": "user", "content": "q"},
        {"role": "system", "content": "summary of earlier talk"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "now"},
    ]
    assert chat_messages("sys", history, Message.user("now"), max_history=0) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "now"},
    ]
