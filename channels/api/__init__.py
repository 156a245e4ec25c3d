"""The HTTP API channel (type `api`) with its web chat page."""

from __future__ import annotations

from channels.api.channel import ApiChannel
from channels.registry import ChannelContext
from config import ApiChannelConfig

__all__ = ["ApiChannel", "create"]


def create(config: ApiChannelConfig, context: ChannelContext) -> ApiChannel:
    channel = ApiChannel(config, context.profile, context.history, data_dir=context.data_dir)
    channel.agent = context.agent
    channel.agent_names = context.agent_names
    return channel
