"""Configuration: pydantic models of gateway.yaml and profile files, and their loader.

`load_gateway(path)` reads gateway.yaml and every profile in its profiles_dir, expands
`${VAR}` / `${VAR:-default}` from the environment, and either returns a `LoadedConfig` or
raises `ConfigError` whose `problems` say, with file and line, everything that is wrong.
"""

from config.agents import (
    AGENT_TYPES,
    DEFAULT_AGENT,
    AgentConfig,
    AgentRoute,
    EchoAgentConfig,
    OpenAIAgentConfig,
    RouteMatch,
    TranscriptionConfig,
    WebhookAgentConfig,
)
from config.bus import BusConfig, NatsConfig
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
from config.channels.base import ChannelConfigBase
from config.channels.chat import LineConfig, MatrixConfig
from config.channels.china import FeishuConfig, QQBotConfig, WecomBotConfig, WeComConfig
from config.channels.phone import TwilioConfig, WhatsAppConfig
from config.common import ConfigModel
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
    "DEFAULT_AGENT",
    "DEFAULT_PROFILE_ID",
    "AgentConfig",
    "AgentRoute",
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
    "RouteMatch",
    "SessionsConfig",
    "SlackConfig",
    "TelegramConfig",
    "TranscriptionConfig",
    "TwilioConfig",
    "WeComConfig",
    "WebhookAgentConfig",
    "WecomBotConfig",
    "WhatsAppConfig",
    "default_config",
    "load_gateway",
    "load_profile",
]
