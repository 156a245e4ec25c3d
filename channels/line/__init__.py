"""LINE (`type: line`): a webhook on the daemon's HTTP server and line-bot-sdk v3's async
Messaging API.

`create(config, context)` is the factory the channel registry calls; the registry imports this
module only for profiles that use LINE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.line.channel import LineChannel
from channels.line.signature import SIGNATURE_HEADER, signature_of

if TYPE_CHECKING:
    from channels.registry import ChannelContext
    from config import LineConfig

__all__ = ["SIGNATURE_HEADER", "LineChannel", "create", "signature_of"]


def create(config: LineConfig, context: ChannelContext) -> LineChannel:
    return LineChannel(config, data_dir=context.data_dir)
