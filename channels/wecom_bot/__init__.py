"""WeCom AI bot (`type: wecom-bot`): the bot's own websocket to WeCom, streamed replies.

`create(config, context)` is the factory the channel registry calls; the registry imports this
module only for profiles that use the WeCom AI bot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.wecom_bot.channel import MARKDOWN_LIMIT, STREAM_LIMIT, WecomBotChannel
from channels.wecom_bot.connection import WecomBotTimeouts

if TYPE_CHECKING:
    from channels.registry import ChannelContext
    from config import WecomBotConfig

__all__ = ["MARKDOWN_LIMIT", "STREAM_LIMIT", "WecomBotChannel", "WecomBotTimeouts", "create"]


def create(config: WecomBotConfig, context: ChannelContext) -> WecomBotChannel:
    return WecomBotChannel(config, data_dir=context.data_dir)
