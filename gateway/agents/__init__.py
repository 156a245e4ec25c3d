"""The agents a profile can talk to, and `create_agent` to build one from its config."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, assert_never

from channels.media_links import MediaLinks
from config import (
    AgentConfig,
    EchoAgentConfig,
    OpenAIAgentConfig,
    ProfileConfig,
    WebhookAgentConfig,
)
from gateway.agents.base import Agent, AgentReply, AgentTurn, ReplyFile, SnapshotSink
from gateway.agents.echo import EchoAgent
from gateway.agents.errors import AgentError, AgentFailure
from gateway.agents.snapshots import SnapshotPacing, SnapshotStream
from gateway.agents.webhook import SIGNATURE_HEADER, WebhookAgent, sign_body, verify_signature

if TYPE_CHECKING:
    from gateway.agents.openai_compat import OpenAICompatAgent

__all__ = [
    "SIGNATURE_HEADER",
    "Agent",
    "AgentError",
    "AgentFailure",
    "AgentReply",
    "AgentTurn",
    "EchoAgent",
    "OpenAICompatAgent",
    "ReplyFile",
    "SnapshotPacing",
    "SnapshotSink",
    "SnapshotStream",
    "WebhookAgent",
    "create_agent",
    "open_agents",
    "sign_body",
    "verify_signature",
]


def create_agent(config: AgentConfig, *, media_links: MediaLinks | None = None) -> Agent:
    """The agent a profile's `agent:` section describes; enter it (`async with`) to run turns.

    `media_links` makes the links to received files a webhook agent is sent (the process's,
    `ProcessServices.media_links`; None sends none)."""
    if isinstance(config, EchoAgentConfig):
        return EchoAgent.from_config(config)
    if isinstance(config, OpenAIAgentConfig):
        # The openai SDK takes most of a second to import: only profiles that use it pay.
        from gateway.agents.openai_compat import OpenAICompatAgent

        return OpenAICompatAgent(config)
    if isinstance(config, WebhookAgentConfig):
        return WebhookAgent(config, media_links=media_links)
    assert_never(config)


@asynccontextmanager
async def open_agents(
    config: ProfileConfig, *, media_links: MediaLinks | None = None
) -> AsyncIterator[dict[str, Agent]]:
    """Every agent of the profile (`agent:` and `agents:`) by name, entered; closed on the way
    out."""
    async with AsyncExitStack() as stack:
        agents: dict[str, Agent] = {}
        for name, agent_config in config.named_agents().items():
            agent = create_agent(agent_config, media_links=media_links)
            agents[name] = await stack.enter_async_context(agent)
        yield agents


def __getattr__(name: str) -> object:
    if name == "OpenAICompatAgent":
        from gateway.agents.openai_compat import OpenAICompatAgent

        return OpenAICompatAgent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
