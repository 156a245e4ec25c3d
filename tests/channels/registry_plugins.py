"""What the registry tests build: a plugin class, a factory, and a class that is no channel."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bus import InboundSender, OutboundMessage
from channels.base import Channel
from channels.registry import ChannelContext


class EchoPluginChannel(Channel):
    """A third-party channel: three members and a `(config, context)` constructor."""

    def __init__(self, config: Any, context: ChannelContext) -> None:
        self.config = config
        self.context = context
        self.sent: list[OutboundMessage] = []

    @property
    def name(self) -> str:
        return str(self.config.options.get("name", "echo"))

    async def start(self, inbound: InboundSender) -> None:
        return None

    async def send(self, message: OutboundMessage) -> None:
        self.sent.append(message)


def create(config: Any, context: ChannelContext) -> Channel:
    """A factory, as `channels.<type>:create` is."""
    return EchoPluginChannel(config, context)


class NotAChannel:
    def __init__(self, config: Any, context: ChannelContext) -> None:
        self.config = config


@dataclass
class FakeConfig:
    """The fields of a channel config the registry reads (the real ones are pydantic models)."""

    type: str
    allow: list[str | int] = field(default_factory=list)
    edit_interval_s: float | None = None
    class_path: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
