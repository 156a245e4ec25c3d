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


# Every platform's `create` maps its config to its constructor field by field, typed at both
# ends: they read alike on purpose.
def create(config: LineConfig, context: ChannelContext) -> LineChannel:
    channel = LineChannel(
        channel_secret=config.channel_secret.get_secret_value(),
        channel_access_token=config.channel_access_token.get_secret_value(),
        data_dir=context.data_dir,
        webhook_path=config.webhook_path,
        api_base_url=config.api_base_url,
        data_api_base_url=config.data_api_base_url,
    )
    return channel
