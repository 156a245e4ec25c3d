"""The OpenAI-compatible agent inside the daemon: history kept, failures apologised for."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI, ScriptedCompletion
from tests.support.daemon import DaemonProcess, write_config
from tests.support.hub import ChannelHub

pytestmark = pytest.mark.slow

API_KEY = "sk-test-0123456789abcdefghij"


@pytest.fixture
async def hub() -> AsyncIterator[ChannelHub]:
    async with ChannelHub() as running:
        yield running


async def test_openai_agent_answers_with_history_and_apologises_without_secrets(
    tmp_path: Path, hub: ChannelHub
) -> None:
    async with FakeOpenAI(api_key=API_KEY) as fake:
        profile = f"""\
agent:
  type: openai
  base_url: {fake.base_url}
  model: fake-model
  api_key: ${{TEST_OPENAI_KEY}}
  system_prompt: Be brief.
channels:
  - type: plugin
    class_path: tests.support.socket_channel:SocketChannel
    options: {{port: {hub.port}, name: test}}
    allow: ["*"]
"""
        config = write_config(tmp_path, {"llm": profile})
        daemon = await DaemonProcess(config, env={"TEST_OPENAI_KEY": API_KEY}).start()
        try:
            fake.script(ScriptedCompletion(text="Paris is the capital."))
            await hub.say("What is the capital of France?")
            assert (await hub.reply()).content == "Paris is the capital."

            fake.script(ScriptedCompletion(text="About two million people."))
            await hub.say("How many people live there?")
            assert (await hub.reply()).content == "About two million people."
            sent = fake.requests[-1].body["messages"]
            assert [(m["role"], m["content"]) for m in sent] == [
                ("system", "Be brief."),
                ("user", "What is the capital of France?"),
                ("assistant", "Paris is the capital."),
                ("user", "How many people live there?"),
            ]

            fake.script(ScriptedCompletion(status=401, error_message=f"bad key {API_KEY}"))
            await hub.say("And Germany?")
            apology = (await hub.reply()).content
            assert apology.startswith("Sorry")
            assert API_KEY not in apology
            failure = await daemon.wait_log(lambda e: e.get("event") == "turn.agent_failed")
            assert "401" in str(failure["error"])
            assert API_KEY not in str(daemon.logs)
        finally:
            daemon.signal(signal.SIGTERM)
            assert await daemon.wait() == 0
