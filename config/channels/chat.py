"""The chat apps with a bot API: Telegram, Discord, Slack, Matrix and LINE.

Every model builds on `ChannelConfigBase` (`config.channels.base`); each field's
description documents its platform in the generated reference (`python -m config.describe`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, PositiveFloat, SecretStr, field_validator

from config.channels.base import ChannelConfigBase, webhook_path_field
from config.common import (
    HttpUrlText,
    OptionalHttpUrlText,
    OptionalSecret,
    Secret,
    UrlPath,
    WebSocketUrlText,
)
from config.problems import ConfigValueError, ModeRequires

# The Matrix spec's user id grammar: "@localpart:server_name".
_USER_ID = re.compile(r"@[^:\s]+:\S+")


class MatrixConfig(ChannelConfigBase):
    type: Literal["matrix"] = Field("matrix", description="Channel kind: a Matrix bot account.")
    homeserver: HttpUrlText = Field(
        description="Base URL of the bot's homeserver client API, e.g. https://matrix.org."
    )
    user_id: str = Field(description="The bot's Matrix user id, e.g. @octos:example.org.")
    access_token: Secret = Field(description="Access token of the bot's account.")
    require_mention: bool = Field(
        True,
        description="In rooms with more than two members, answer only messages that mention "
        "the bot.",
    )
    auto_join: bool = Field(True, description="Accept room invites from users on the allow list.")

    @field_validator("user_id")
    @classmethod
    def _user_id_shape(cls, value: str) -> str:
        if not _USER_ID.fullmatch(value):
            raise ConfigValueError(
                f"{value!r} is not a Matrix user id",
                "write it as @localpart:server.name, e.g. @octos:example.org",
            )
        return value


class LineConfig(ChannelConfigBase):
    type: Literal["line"] = Field("line", description="Channel kind: a LINE Official Account.")
    channel_secret: Secret = Field(
        description="Channel secret (LINE Developers console, Basic settings); verifies the "
        "X-Line-Signature of every webhook request."
    )
    channel_access_token: Secret = Field(
        description="Long-lived channel access token (Messaging API tab)."
    )
    webhook_path: UrlPath = webhook_path_field("/line/webhook", "LINE's webhook requests")
    api_base_url: HttpUrlText = Field(
        "https://api.line.me", description="Messaging API base URL (replies, pushes, bot info)."
    )
    data_api_base_url: HttpUrlText = Field(
        "https://api-data.line.me",
        description="Data API base URL, where images, video, audio and files users send are "
        "downloaded from.",
    )


# Telegram's own rule for the X-Telegram-Bot-Api-Secret-Token header.
_TELEGRAM_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")


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
    poll_timeout_s: PositiveFloat = Field(
        30, description="Long-polling timeout of each getUpdates call, in seconds."
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
