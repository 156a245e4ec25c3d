"""One model per chat platform a profile connects to, told apart by `type`.

The fields that mean the same on every platform (`allow`, `webhook_path`) are declared through
`config.channel_fields`, each worded for its platform. The others that look alike (api_base_url,
timeouts) are declared one by one: each description documents that platform in the generated
reference (`python -m config.reference`), so that parallel is on purpose. What the models share
in behaviour is written once: `ChannelConfigBase`, the types of `config.common`, and
`MODE_REQUIRES` for the keys a mode needs.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator

from config.channel_fields import allow_list_field, webhook_path_field
from config.channels_email import EmailConfigFields
from config.common import (
    AllowEntry,
    ConfigModel,
    HttpUrlText,
    OptionalHttpUrlText,
    OptionalSecret,
    Port,
    Secret,
    UrlPath,
    WebSocketUrlText,
)
from config.http_limits import (
    AllowedHost,
    HttpLimitsConfig,
    allowed_hosts_field,
    limits_field,
)
from config.problems import ConfigValueError, ModeRequires
from config.rate_limits import RateLimitsConfig

#: Where the HTTP API and its web chat listen unless configured otherwise.
DEFAULT_API_PORT = 8091

# Telegram's own rule for the X-Telegram-Bot-Api-Secret-Token header.
_TELEGRAM_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")


def _everyone() -> list[AllowEntry]:
    return ["*"]


class ChannelConfigBase(ConfigModel):
    """Fields every channel has."""

    #: The keys a channel needs in one of its modes, checked in this order.
    MODE_REQUIRES: ClassVar[tuple[ModeRequires, ...]] = ()

    allow: list[AllowEntry] = allow_list_field("User ids or @usernames")
    edit_interval_s: float | None = Field(
        None,
        gt=0,
        description="Shortest time between edits of a streamed reply; unset uses the "
        "platform's own interval.",
    )
    pairing: bool = Field(
        False,
        description="Answer a stranger with a one-time code; `octos-gateway pair CODE` then "
        "adds them to the allow list without editing this file.",
    )
    rate_limits: RateLimitsConfig = Field(
        default_factory=RateLimitsConfig,
        description="How fast replies and edits go out: the platform's published limits "
        '(README, "Flood limits"), each overridable here.',
    )

    @model_validator(mode="after")
    def _mode_requires(self) -> Self:
        for requirement in self.MODE_REQUIRES:
            requirement.check(self)
        return self

    @property
    def routing_key(self) -> str:
        """What tells this channel apart from the profile's others: its type."""
        return str(getattr(self, "type", type(self).__name__))


class TelegramConfig(ChannelConfigBase):
    type: Literal["telegram"] = Field("telegram", description="Channel kind: a Telegram bot.")
    token: Secret = Field(description="Bot token from @BotFather.")
    base_url: HttpUrlText = Field(
        "https://api.telegram.org/bot",
        description="Bot API prefix the token is appended to (a local Bot API server, tests).",
    )
    base_file_url: HttpUrlText = Field(
        "https://api.telegram.org/file/bot",
        description="Prefix for downloading files sent to the bot.",
    )
    mode: Literal["polling", "webhook"] = Field(
        "polling", description="Receive updates by long polling or by a webhook."
    )
    webhook_url: OptionalHttpUrlText = Field(
        None, description="Public URL Telegram posts updates to (webhook mode)."
    )
    webhook_path: UrlPath = webhook_path_field("/telegram/webhook", "webhook updates")
    secret_token: OptionalSecret = Field(
        None,
        description="Secret Telegram sends in X-Telegram-Bot-Api-Secret-Token with each "
        "webhook update (1-256 of A-Z a-z 0-9 _ -); required in webhook mode.",
    )
    require_mention: bool = Field(
        True, description="In groups, answer only messages that mention or reply to the bot."
    )
    parse_mode: Literal["html", "markdownv2", "none"] = Field(
        "html", description="How formatted replies are marked up for Telegram."
    )
    poll_timeout_s: float = Field(
        30, gt=0, description="Long-polling timeout of each getUpdates call, in seconds."
    )

    @field_validator("secret_token")
    @classmethod
    def _secret_token_charset(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _TELEGRAM_SECRET_TOKEN.fullmatch(value.get_secret_value()):
            raise ConfigValueError(
                "may hold only 1 to 256 of A-Z, a-z, 0-9, _ and -",
                "choose a token Telegram accepts, e.g. from `openssl rand -hex 32`",
            )
        return value

    MODE_REQUIRES = (
        ModeRequires(
            "webhook",
            "webhook_url",
            "add webhook_url: https://your.host/telegram/webhook, or use mode: polling",
        ),
        # Without it anyone who finds the URL can post forged updates as any user.
        ModeRequires(
            "webhook",
            "secret_token",
            "add secret_token: ${TELEGRAM_SECRET_TOKEN} (e.g. from `openssl rand -hex 32`), "
            "or use mode: polling",
            why=" (it proves an update comes from Telegram)",
        ),
    )


class DiscordConfig(ChannelConfigBase):
    type: Literal["discord"] = Field("discord", description="Channel kind: a Discord bot.")
    token: Secret = Field(description="Bot token from the Discord developer portal.")
    require_mention: bool = Field(
        True, description="In servers, answer only messages that mention the bot."
    )
    api_base_url: HttpUrlText = Field(
        "https://discord.com/api/v10", description="Discord REST API base URL."
    )
    gateway_url: WebSocketUrlText = Field(
        "wss://gateway.discord.gg", description="Discord gateway websocket URL."
    )


class SlackConfig(ChannelConfigBase):
    type: Literal["slack"] = Field("slack", description="Channel kind: a Slack app.")
    bot_token: Secret = Field(description="Bot user OAuth token (xoxb-...).")
    app_token: OptionalSecret = Field(
        None, description="App-level token (xapp-...) for Socket Mode."
    )
    mode: Literal["socket", "http"] = Field(
        "socket", description="Receive events over Socket Mode or as HTTP requests."
    )
    signing_secret: OptionalSecret = Field(
        None, description="Signing secret that verifies HTTP event requests (http mode)."
    )
    base_url: HttpUrlText = Field("https://slack.com/api/", description="Slack Web API base URL.")
    webhook_path: UrlPath = webhook_path_field("/slack/events", "events (http mode)")

    MODE_REQUIRES = (
        ModeRequires(
            "socket",
            "app_token",
            "add app_token: ${SLACK_APP_TOKEN} (an xapp- token), or use mode: http",
        ),
        ModeRequires(
            "http",
            "signing_secret",
            "add signing_secret: ${SLACK_SIGNING_SECRET}, or use mode: socket",
        ),
    )


class ApiChannelConfig(ChannelConfigBase):
    type: Literal["api"] = Field(
        "api", description="Channel kind: an HTTP API with a web chat page."
    )
    allow: list[AllowEntry] = Field(
        default_factory=_everyone,
        description='Client ids allowed to talk to the bot; default "*", since the bearer '
        "token is the access control.",
    )
    host: str = Field("127.0.0.1", description="Address the API listens on.")
    port: Port = Field(
        DEFAULT_API_PORT, description="TCP port the API listens on; 0 picks a free one."
    )
    auth_token: OptionalSecret = Field(
        None, description="Bearer token clients must send; unset means no authentication."
    )
    cors_origins: list[str] = Field(
        default_factory=list, description="Browser origins allowed to call the API (CORS)."
    )
    max_body_bytes: int = Field(
        1_000_000, ge=1, description="Largest request body accepted, in bytes."
    )
    allowed_hosts: list[AllowedHost] = allowed_hosts_field()
    reply_timeout_s: float = Field(
        300.0,
        gt=0,
        description="Seconds a request waits for its reply before a JSON 504 (or an SSE "
        "`error` event).",
    )
    limits: HttpLimitsConfig = limits_field()
    expose_without_token: bool = Field(
        False,
        description="Listen beyond loopback without auth_token on purpose (a container whose "
        "port is published only on the host's loopback): no start-up warning about it.",
    )


class CliChannelConfig(ChannelConfigBase):
    type: Literal["cli"] = Field("cli", description="Channel kind: the local terminal.")
    allow: list[AllowEntry] = Field(
        default_factory=_everyone,
        description='Who may use the terminal; default "*", the terminal being local.',
    )


class PluginChannelConfig(ChannelConfigBase):
    type: Literal["plugin"] = Field(
        "plugin", description="Channel kind: a channel class of your own."
    )
    class_path: str = Field(
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="Where the Channel subclass lives, as package.module:ClassName.",
    )
    # Not in repr: a plugin's options may well hold its credentials.
    options: dict[str, Any] = Field(
        default_factory=dict,
        repr=False,
        description="Keyword arguments passed to the plugin's constructor.",
    )

    @property
    def routing_key(self) -> str:
        return f"plugin:{self.class_path}"


class EmailConfig(EmailConfigFields, ChannelConfigBase):
    type: Literal["email"] = Field(
        "email", description="Channel kind: a mailbox, read over IMAP and answered over SMTP."
    )


# Platform models kept in modules of their own; they build on ChannelConfigBase above.
from config.channels_feishu import FeishuConfig  # noqa: E402
from config.channels_line import LineConfig  # noqa: E402
from config.channels_matrix import MatrixConfig  # noqa: E402
from config.channels_phone import TwilioConfig, WhatsAppConfig  # noqa: E402
from config.channels_wecom import WeComConfig  # noqa: E402
from config.channels_wecom_bot_qq import QQBotConfig, WecomBotConfig  # noqa: E402

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
