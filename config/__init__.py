"""Configuration: pydantic models of gateway.yaml and profile files, and their loader.

`load_gateway(path)` reads gateway.yaml and every profile in its profiles_dir, expands
`${VAR}` / `${VAR:-default}` from the environment, and either returns a `LoadedConfig` or
raises `ConfigError` whose `problems` say, with file and line, everything that is wrong.
"""

from config.agents import (
    AGENT_TYPES,
    AgentConfig,
    EchoAgentConfig,
    OpenAIAgentConfig,
    WebhookAgentConfig,
)
from config.bus import BusConfig, NatsConfig
from config.channel_base import ChannelConfigBase
from config.channels import (
    CHANNEL_TYPES,
    ApiChannelConfig,
    ChannelConfig,
    CliChannelConfig,
    DiscordConfig,
    EmailConfig,
    PluginChannelConfig,
    SlackConfig,
    TelegramConfig,
)
from config.channels_feishu import FeishuConfig
from config.channels_line import LineConfig
from config.channels_matrix import MatrixConfig
from config.channels_phone import TwilioConfig, WhatsAppConfig
from config.channels_wecom import WeComConfig
from config.channels_wecom_bot_qq import QQBotConfig, WecomBotConfig
from config.common import ConfigModel
from config.describe import (
    describe_config_keys,
    describe_gateway_keys,
    describe_model_keys,
    describe_profile_keys,
)
from config.gateway import GatewayConfig, HttpConfig, LoggingConfig, LogLevel
from config.loader import (
    DEFAULT_PROFILE_ID,
    LoadedConfig,
    default_config,
    load_gateway,
    load_profile,
)
from config.problems import ConfigError, ConfigProblem, ConfigValueError, ConfigWarning
from config.profile import FsyncPolicy, ProfileConfig, ProfileWarning, QueueMode, SessionsConfig

__all__ = [
    "AGENT_TYPES",
    "CHANNEL_TYPES",
    "DEFAULT_PROFILE_ID",
    "AgentConfig",
    "ApiChannelConfig",
    "BusConfig",
    "ChannelConfig",
    "ChannelConfigBase",
    "CliChannelConfig",
    "ConfigError",
    "ConfigModel",
    "ConfigProblem",
    "ConfigValueError",
    "ConfigWarning",
    "DiscordConfig",
    "EchoAgentConfig",
    "EmailConfig",
    "FeishuConfig",
    "FsyncPolicy",
    "GatewayConfig",
    "HttpConfig",
    "LineConfig",
    "LoadedConfig",
    "LogLevel",
    "LoggingConfig",
    "MatrixConfig",
    "NatsConfig",
    "OpenAIAgentConfig",
    "PluginChannelConfig",
    "ProfileConfig",
    "ProfileWarning",
    "QQBotConfig",
    "QueueMode",
    "SessionsConfig",
    "SlackConfig",
    "TelegramConfig",
    "TwilioConfig",
    "WeComConfig",
    "WebhookAgentConfig",
    "WecomBotConfig",
    "WhatsAppConfig",
    "default_config",
    "describe_config_keys",
    "describe_gateway_keys",
    "describe_model_keys",
    "describe_profile_keys",
    "load_gateway",
    "load_profile",
]
