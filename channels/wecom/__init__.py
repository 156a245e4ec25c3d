"""WeCom (企业微信) self-built application (`type: wecom`): encrypted callbacks, message/send.

`create(config, context)` is the factory the channel registry calls; aiohttp and cryptography
are all it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.wecom.channel import WeComChannel
from channels.wecom.crypto import WeComCrypto

if TYPE_CHECKING:
    from channels.registry import ChannelContext
    from config import WeComConfig

__all__ = ["WeComChannel", "WeComCrypto", "create"]


def create(config: WeComConfig, context: ChannelContext) -> WeComChannel:
    return WeComChannel(config, data_dir=context.data_dir)
