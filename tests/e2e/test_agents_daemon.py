"""Several agents in one profile, through the daemon: routes send a group and a `/code` prefix
to the second agent (a webhook fake sees only those turns, without the prefix), everything else
to `default`; `/agent` switches a chat and the choice survives a restart; each agent's turns
are counted under its name in /metrics. And the API channel's OpenAI-compatible door, with the
official `openai` client (streamed and whole) and plain HTTP for its error shapes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from openai import AsyncOpenAI

from tests.e2e.conftest import DAEMON_ENV, logged
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply
from tests.support.daemon import DaemonProcess, free_port, write_config
from tests.support.hub import ChannelHub

pytestmark = pytest.mark.slow

TOKEN = "api-token-0123456789"


@pytest.fixture
async def hub() -> AsyncIterator[ChannelHub]:
    async with ChannelHub() as running:
        yield running


@pytest.fixture
async def webhook() -> AsyncIterator[FakeWebhook]:
    async with FakeWebhook() as server:
        yield server


def two_agents(hub_port: int, webhook_url: str, *, api_port: int = 0) -> str:
    api = (
        f"""
  - type: api
    port: {api_port}
    auth_token: {TOKEN}
    allow: ["*"]"""
        if api_port
        else ""
    )
    return f"""\
agents:
  default: {{type: echo, pieces: 2}}
  coder: {{type: webhook, url: "{webhook_url}"}}
routes:
  - match: {{prefix: /code}}
    agent: coder
  - match: {{channel: test, chat_type: group}}
    agent: coder
agent_switch: true
channels:
  - type: plugin
    class_path: tests.support.socket_channel:SocketChannel
    options: {{port: {hub_port}, name: test}}
    allow: ["*"]{api}
"""


def posted_texts(webhook: FakeWebhook) -> list[str]:
    return [post.json["message"]["content"] for post in webhook.requests]


async def test_routes_send_a_group_and_a_prefix_to_the_second_agent(
    tmp_path: Path, hub: ChannelHub, webhook: FakeWebhook
) -> None:
    config = write_config(tmp_path, {"bot": two_agents(hub.port, webhook.url)})
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    try:
        webhook.script(ScriptedReply(text="coded"), ScriptedReply(text="group answer"))
        await hub.say("hello there", chat_id="dm-1", metadata={"chat_type": "private"})
        assert (await hub.reply()).content == "hello there"
        await hub.say("/code fix the bug", chat_id="dm-1", metadata={"chat_type": "private"})
        assert (await hub.reply()).content == "coded"
        await hub.say("anyone?", chat_id="-100123", metadata={"chat_type": "supergroup"})
        assert (await hub.reply()).content == "group answer"
        await hub.say("/codex is not the prefix", chat_id="dm-1")
        assert "Unknown command /codex" in (await hub.reply()).content
        assert posted_texts(webhook) == ["fix the bug", "anyone?"]

        assert await daemon.metric("octos_turns_total", agent="coder", result="ok") == 2
        assert await daemon.metric("octos_turns_total", agent="default", result="ok") == 1
        assert await daemon.metric("octos_agent_tokens_total", agent="default", kind="input") > 0
        status, body = await daemon.get("/status.json")
        assert status == 200
        (profile,) = json.loads(body)["profiles"]
        assert profile["agents"]["coder"]["turns"] == {"ok": 2, "agent_error": 0}
        assert profile["agents"]["default"]["turns"] == {"ok": 1, "agent_error": 0}
        assert profile["agent"] == "default (echo), coder (webhook)"
    finally:
        await daemon.stop()


async def test_agent_switches_a_chat_and_the_choice_survives_a_restart(
    tmp_path: Path, hub: ChannelHub, webhook: FakeWebhook
) -> None:
    config = write_config(tmp_path, {"bot": two_agents(hub.port, webhook.url)})
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    try:
        await hub.next_hello()
        await hub.say("/agent", chat_id="dm-2")
        listing = (await hub.reply()).content
        assert "- default" in listing
        assert "- coder" in listing
        await hub.say("/agent nobody", chat_id="dm-2")
        assert "No agent named 'nobody'" in (await hub.reply()).content
        await hub.say("/agent coder", chat_id="dm-2")
        assert (await hub.reply()).content == "This chat now talks to 'coder'."
    finally:
        await daemon.stop()
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    try:
        await hub.next_hello()  # the restarted daemon's channel, not the one that left
        webhook.script(ScriptedReply(text="from coder"))
        await hub.say("still you?", chat_id="dm-2")
        assert (await hub.reply()).content == "from coder"
        await hub.say("and me?", chat_id="dm-3")
        assert (await hub.reply()).content == "and me?"  # another chat: default
        assert posted_texts(webhook) == ["still you?"]
    finally:
        await daemon.stop()


async def test_a_chat_cannot_switch_when_the_profile_does_not_let_it(
    tmp_path: Path, hub: ChannelHub, webhook: FakeWebhook
) -> None:
    profile = two_agents(hub.port, webhook.url).replace("agent_switch: true", "")
    daemon = await DaemonProcess(write_config(tmp_path, {"bot": profile}), env=DAEMON_ENV).start()
    try:
        await hub.say("/agent coder")
        assert "agent_switch is off" in (await hub.reply()).content
        await hub.say("who answers?")
        assert (await hub.reply()).content == "who answers?"
        assert webhook.requests == []
    finally:
        await daemon.stop()


@pytest.fixture
async def api_daemon(
    tmp_path: Path, hub: ChannelHub, webhook: FakeWebhook
) -> AsyncIterator[tuple[DaemonProcess, str]]:
    api_port = free_port()
    profile = two_agents(hub.port, webhook.url, api_port=api_port)
    daemon = DaemonProcess(write_config(tmp_path, {"bot": profile}), env=DAEMON_ENV)
    try:
        await daemon.start()
        await daemon.wait_log(logged("api.web_chat_ready"))
        yield daemon, f"http://127.0.0.1:{api_port}"
    finally:
        await daemon.stop()


async def test_the_openai_client_gets_whole_and_streamed_completions(
    api_daemon: tuple[DaemonProcess, str], webhook: FakeWebhook
) -> None:
    _daemon, origin = api_daemon
    client = AsyncOpenAI(base_url=f"{origin}/v1", api_key=TOKEN)
    try:
        models = await client.models.list()
        assert [model.id for model in models.data] == ["default", "coder"]

        whole = await client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "first question"}],
            user="editor-1",
        )
        assert whole.object == "chat.completion"
        assert whole.choices[0].message.content == "first question"
        assert whole.choices[0].finish_reason == "stop"
        assert whole.usage is not None

        webhook.script(
            ScriptedReply(mode="sse", text="streamed from coder", usage={"input_tokens": 7})
        )
        stream = await client.chat.completions.create(
            model="coder",
            messages=[{"role": "user", "content": "second question"}],
            user="editor-1",
            stream=True,
            stream_options={"include_usage": True},
        )
        deltas, usage = [], None
        async for chunk in stream:
            assert chunk.object == "chat.completion.chunk"
            if chunk.choices and chunk.choices[0].delta.content:
                deltas.append(chunk.choices[0].delta.content)
            usage = chunk.usage or usage
        assert "".join(deltas) == "streamed from coder"
        assert usage is not None
        assert usage.prompt_tokens == 7
        # The coder was sent the gateway's session as history: the first turn is in it.
        history = webhook.requests[-1].json["history"]
        assert [m["content"] for m in history] == ["first question", "first question"]
        assert webhook.requests[-1].json["message"]["content"] == "second question"

        reset = await client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "/reset"}], user="editor-1"
        )
        assert "Session cleared" in (reset.choices[0].message.content or "")
    finally:
        await client.close()


async def test_the_session_keeps_both_turns_and_earlier_messages_seed_an_empty_one(
    api_daemon: tuple[DaemonProcess, str],
) -> None:
    _daemon, origin = api_daemon
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Octos-Chat-Id": "seeded"}
    async with aiohttp.ClientSession(headers=headers) as http:
        body = {
            "model": "default",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "earlier"},
                {"role": "assistant", "content": "earlier answer"},
                {"role": "user", "content": [{"type": "text", "text": "now"}]},
            ],
        }
        async with http.post(f"{origin}/v1/chat/completions", json=body) as response:
            assert response.status == 200, await response.text()
        body["messages"] = [{"role": "user", "content": "again"}]
        async with http.post(f"{origin}/v1/chat/completions", json=body) as response:
            assert response.status == 200
        async with http.get(f"{origin}/v1/sessions/seeded/messages") as response:
            stored = [(m["role"], m["content"]) for m in (await response.json())["messages"]]
    assert stored == [
        ("system", "be brief"),
        ("user", "earlier"),
        ("assistant", "earlier answer"),
        ("user", "now"),
        ("assistant", "now"),
        ("user", "again"),
        ("assistant", "again"),
    ]


async def test_errors_are_in_openai_shape(api_daemon: tuple[DaemonProcess, str]) -> None:
    _daemon, origin = api_daemon
    url = f"{origin}/v1/chat/completions"
    good = {"Authorization": f"Bearer {TOKEN}"}
    question = {"model": "default", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=question) as response:
            assert response.status == 401
            assert (await response.json())["error"]["code"] == "invalid_api_key"
        async with http.get(f"{origin}/v1/models") as response:
            assert response.status == 401
            assert (await response.json())["error"]["type"] == "invalid_request_error"
        unknown = {**question, "model": "gpt-9"}
        async with http.post(url, json=unknown, headers=good) as response:
            assert response.status == 404
            error = (await response.json())["error"]
            assert error["code"] == "model_not_found"
            assert "gpt-9" in error["message"]
        async with http.post(url, json={"model": "default"}, headers=good) as response:
            assert response.status == 400
            assert set((await response.json())["error"]) == {"message", "type", "code"}
        async with http.post(
            url,
            data=json.dumps(question)[:-3],
            headers={**good, "Content-Type": "application/json"},
        ) as response:
            assert response.status == 400
            assert "not valid JSON" in (await response.json())["error"]["message"]
