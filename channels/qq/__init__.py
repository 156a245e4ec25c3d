"""QQ bot (`type: qq-bot`): Ed25519-signed webhook events, passive replies through API v2.

`create(config, context)` is the factory the channel registry calls; the registry imports this
module (and `cryptography`) only for profiles that use the QQ bot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.qq.channel import QQBotChannel, QQKeyboardChannel
from channels.qq.webhook import seed_from_secret, sign_hex, signing_key

if TYPE_CHECKING:
    from channels.registry import ChannelContext
    from config import QQBotConfig

__all__ = [
    "QQBotChannel",
    "QQKeyboardChannel",
    "create",
    "seed_from_secret",
    "sign_hex",
    "signing_key",
]


def create(config: QQBotConfig, context: ChannelContext) -> QQBotChannel:
    kind = QQKeyboardChannel if config.keyboard else QQBotChannel
    return kind(config, data_dir=context.data_dir)
