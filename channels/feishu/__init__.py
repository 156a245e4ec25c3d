"""Feishu/Lark (`type: feishu`): the long connection or webhooks in, interactive cards out.

`create(config, context)` is the factory the channel registry calls; the registry imports this
module only for profiles that use Feishu (it needs the `protobuf` package: the `feishu` extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.feishu.channel import FeishuChannel
from channels.feishu.webhook import FeishuCipher

if TYPE_CHECKING:
    from channels.registry import ChannelContext
    from config import FeishuConfig

__all__ = ["FeishuChannel", "FeishuCipher", "create"]


def create(config: FeishuConfig, context: ChannelContext) -> FeishuChannel:
    return FeishuChannel(
        config, data_dir=context.data_dir, inbound_reactions=context.inbound_reactions
    )
