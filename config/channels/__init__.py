"""One model per chat platform a profile connects to, told apart by `type` (`ChannelConfig`).

Every model builds on `config.channels.base.ChannelConfigBase`; the fields that mean the same on
every platform (`allow`, `webhook_path`) are declared through its helpers, each worded for its
platform. The others (api_base_url, timeouts) are declared one by one: each description
documents that platform in the generated reference (`python -m config.describe`). What the
models share in behaviour is written once: `ChannelConfigBase`, the types of `config.common`,
and `MODE_REQUIRES` for the keys a mode needs.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from config.channels.base import ChannelConfigBase
from config.channels.chat import (
    DiscordConfig,
    LineConfig,
    MatrixConfig,
    SlackConfig,
    TelegramConfig,
)
from config.channels.china import FeishuConfig, QQBotConfig, WecomBotConfig, WeComConfig
from config.channels.email import EmailConfig
from config.channels.local import (
    DEFAULT_API_PORT,
    ApiChannelConfig,
    CliChannelConfig,
    PluginChannelConfig,
)
from config.channels.phone import TwilioConfig, WhatsAppConfig

ChannelConfig = Annotated[
    TelegramConfig
    | DiscordConfig
    | SlackConfig
    | ApiChannelConfig
    | CliChannelConfig
    | PluginChannelConfig
    | TwilioConfig
    | WhatsAppConfig
    | LineConfig
    | MatrixConfig
    | EmailConfig
    | FeishuConfig
    | WeComConfig
    | WecomBotConfig
    | QQBotConfig,
    Field(discriminator="type"),
]
"""Any channel configuration, told apart by its `type`."""

CHANNEL_TYPES = (
    "telegram",
    "discord",
    "slack",
    "api",
    "cli",
    "plugin",
    "twilio",
    "whatsapp",
    "line",
    "matrix",
    "email",
    "feishu",
    "wecom",
    "wecom-bot",
    "qq-bot",
)

__all__ = [
    "CHANNEL_TYPES",
    "DEFAULT_API_PORT",
    "ApiChannelConfig",
    "ChannelConfig",
    "ChannelConfigBase",
    "CliChannelConfig",
    "DiscordConfig",
    "EmailConfig",
    "FeishuConfig",
    "LineConfig",
    "MatrixConfig",
    "PluginChannelConfig",
    "QQBotConfig",
    "SlackConfig",
    "TelegramConfig",
    "TwilioConfig",
    "WeComConfig",
    "WecomBotConfig",
    "WhatsAppConfig",
]
