"""A profile: one bot, with its agent, its channels and its session settings."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import Field, PositiveFloat, field_validator, model_validator

from config.agents import (
    DEFAULT_AGENT,
    AgentConfig,
    AgentRoute,
    EchoAgentConfig,
    TranscriptionConfig,
)
from config.channels import ApiChannelConfig, ChannelConfig, EmailConfig
from config.common import AtLeastOne, ConfigModel
from config.problems import ConfigValueError, DataPath

QueueMode = Literal["collect", "followup", "interrupt"]
EditsMode = Literal["replace", "new_turn", "ignore"]
FsyncPolicy = Literal["always", "batch", "never"]


class SessionsConfig(ConfigModel):
    fsync: FsyncPolicy = Field(
        "batch",
        description="When the profile's write-ahead log reaches the disk before a platform is "
        "told a message is handled: each record (always), grouped (batch), or left to the OS "
        "(never: a killed process loses nothing, a power cut may lose acknowledged messages).",
    )
    max_history: AtLeastOne = Field(
        50, description="Most recent messages of a session handed to the agent each turn."
    )
    fork_copy: int = Field(
        10, ge=0, description="Recent messages copied into a new topic session by /new."
    )
    max_file_mb: PositiveFloat = Field(
        10, description="Size of a session file, in MB, at which it is compacted."
    )
    max_open: AtLeastOne = Field(
        1000,
        description="Sessions kept open in memory (LRU). A turn in a chat whose session is not "
        "open reads its file again: set it above the chats active at once, memory allowing (an "
        "open session holds its messages).",
    )
    max_concurrent_turns: AtLeastOne = Field(
        10, description="Agent turns that may run at the same time in this profile."
    )
    idle_timeout_s: PositiveFloat = Field(
        1800,
        description="Ignored: idle chats hold no task or timer since turns run on the "
        "write-ahead log; accepted so that older files still load.",
    )
    max_backlog_per_chat: AtLeastOne = Field(
        256,
        description="Messages one chat may have waiting or running; past it new ones are "
        "refused (HTTP 429 with Retry-After; pollers wait) and nothing is stored.",
    )
    max_backlog: AtLeastOne = Field(
        10_000,
        description="Messages the whole profile may have waiting or running; past it new ones "
        "are refused (HTTP 503 with Retry-After; pollers wait) and nothing is stored.",
    )


class ProfileWarning(NamedTuple):
    """A doubtful but valid setting, at a path in the profile's YAML."""

    at: DataPath
    message: str


class ProfileConfig(ConfigModel):
    agent: AgentConfig = Field(
        default_factory=EchoAgentConfig,
        description="The agent that answers: echo (default), openai or webhook; with `agents:` "
        "it is the one named `default`.",
    )
    channels: list[ChannelConfig] = Field(
        default_factory=list,
        description="Chat platforms this bot is on; at most one of each type.",
    )
    sessions: SessionsConfig = Field(
        default_factory=SessionsConfig, description="How conversations are stored."
    )
    queue_mode: QueueMode = Field(
        "collect",
        description="Messages arriving during a turn: collect joins them into the next turn, "
        "followup answers them one by one, interrupt cancels the running turn.",
    )
    max_media_bytes: AtLeastOne = Field(
        20 * 1024 * 1024,
        description="Largest file a user sends that is downloaded, in bytes; a larger one "
        "reaches the agent as a placeholder naming it, its kind and size.",
    )
    transcription: TranscriptionConfig | None = Field(
        None,
        description="Where voice messages and audio files are turned into text before the "
        "agent runs; unset: they reach the agent as a placeholder.",
    )
    delivery_deadline_s: PositiveFloat = Field(
        86_400.0,
        description="Seconds a reply is retried while its platform fails in a way that can pass "
        "(network errors, 5xx, timeouts, rate limits), counted from its turn, across restarts; "
        "then it is a dead letter.",
    )
    buttons_ttl_s: PositiveFloat = Field(
        86_400.0,
        description="Seconds a reply's buttons can be tapped (or, where they are shown as a "
        "numbered list, answered by their number); a later tap is answered 'already answered' "
        "and reaches no agent.",
    )
    buttons_single_use: bool = Field(
        True,
        description="A reply's buttons answer once: after the first tap they are removed where "
        "the platform can edit, and a second tap reaches no agent.",
    )
    edits: EditsMode = Field(
        "replace",
        description="A user's edit of their message: replace puts the new text in place of a "
        "message whose turn has not started (else as new_turn); new_turn answers the edit as "
        "a new message marked '[edited]'; ignore passes no edit on. An edit into a command is "
        "never run.",
    )
    working_reaction: str | None = Field(
        None,
        description="An emoji the bot puts on the user's message while its turn runs (e.g. "
        "'👀'), removed when the reply is sent; on platforms with reactions.",
    )
    inbound_reactions: bool = Field(
        False,
        description="Pass a user's reaction to a bot message to the agent, as a message "
        "'[reaction 👍 to: <the message's start>]'.",
    )

    agents: dict[str, AgentConfig] = Field(
        default_factory=dict,
        description="Several agents by name, beside or instead of `agent:`; the one named "
        "`default` (or `agent:`) answers whatever no route sends elsewhere.",
    )
    routes: list[AgentRoute] = Field(
        default_factory=list,
        description="Which agent answers which messages: the first route whose `match` fits a "
        "message names its agent; no route fits: `default`.",
    )
    agent_switch: bool = Field(
        False,
        description="Let a chat choose its agent with `/agent NAME` (remembered for the chat); "
        "`/agent` alone lists them.",
    )

    @field_validator("channels")
    @classmethod
    def _one_channel_per_type(cls, channels: list[ChannelConfig]) -> list[ChannelConfig]:
        # The type is the routing key of outbound messages: two would be indistinguishable.
        first_index: dict[str, int] = {}
        for index, channel in enumerate(channels):
            key = channel.routing_key
            if key in first_index:
                raise ConfigValueError(
                    f"channel '{key}' is already configured in channels[{first_index[key]}]",
                    "a profile has one channel of each type; for a second bot add a profile",
                    at=(index,),
                )
            first_index[key] = index
        return channels

    @model_validator(mode="after")
    def _agents_named_once(self) -> ProfileConfig:
        if DEFAULT_AGENT in self.agents and "agent" in self.model_fields_set:
            raise ConfigValueError(
                "`agent:` and `agents: {default: ...}` both name the default agent",
                "keep one: move `agent:` into `agents:` as `default`, or drop `agents.default`",
                at=("agents", DEFAULT_AGENT),
            )
        known = self.named_agents()
        for index, route in enumerate(self.routes):
            if route.agent not in known:
                raise ConfigValueError(
                    f"routes[{index}] names agent {route.agent!r}, which this profile does not "
                    "have",
                    f"name one of: {', '.join(known)}; or add it under `agents:`",
                    at=("routes", index, "agent"),
                )
        return self

    def named_agents(self) -> dict[str, AgentConfig]:
        """Every agent by name, `default` first (`agent:` when `agents:` has no `default`)."""
        named: dict[str, AgentConfig] = {DEFAULT_AGENT: self.agents.get(DEFAULT_AGENT, self.agent)}
        named.update((name, config) for name, config in self.agents.items())
        return named

    def agent_summary(self) -> str:
        """The agent's kind (`openai`), or each agent's name and kind when there are several."""
        named = self.named_agents()
        if len(named) == 1:
            return named[DEFAULT_AGENT].type
        return ", ".join(f"{name} ({config.type})" for name, config in named.items())

    def resolve_paths(self, base_dir: Path) -> ProfileConfig:
        """A copy whose relative file paths are resolved against `base_dir` (gateway.yaml's
        directory, as for every path in the configuration)."""
        channels = [
            channel.resolve_paths(base_dir) if isinstance(channel, EmailConfig) else channel
            for channel in self.channels
        ]
        return self.model_copy(update={"channels": channels})

    def warnings(self) -> list[ProfileWarning]:
        """Settings that are valid but probably a mistake; the daemon logs them at start-up."""
        found: list[ProfileWarning] = []
        if not self.channels:
            found.append(
                ProfileWarning(("channels",), "no channels: this profile receives no messages")
            )
        for index, channel in enumerate(self.channels):
            where = f"channels[{index}] ({channel.type})"
            if not channel.allow and not channel.pairing:
                found.append(
                    ProfileWarning(
                        ("channels", index, "allow"),
                        f"{where} has an empty allow list: nobody can talk to this bot "
                        'until you add user ids or "*" (or set pairing: true)',
                    )
                )
            if isinstance(channel, ApiChannelConfig) and _is_exposed(channel):
                found.append(
                    ProfileWarning(
                        ("channels", index, "host"),
                        f"{where} listens on {channel.host} without auth_token: anyone who "
                        "can reach it can talk to the bot",
                    )
                )
        return found


def _is_exposed(channel: ApiChannelConfig) -> bool:
    if channel.auth_token is not None or channel.expose_without_token:
        return False
    if channel.host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(channel.host).is_loopback
    except ValueError:
        return True  # a host name that may resolve to anything
