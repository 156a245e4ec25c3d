"""The platforms of China: Feishu/Lark (`type: feishu`), the WeCom (企业微信) application
(`type: wecom`), the WeCom AI bot (`type: wecom-bot`) and the QQ bot (`type: qq-bot`)."""

from __future__ import annotations

import base64
import binascii
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from config.channels.base import ChannelConfigBase, allow_list_field, webhook_path_field
from config.common import AllowEntry, HttpUrlText, OptionalSecret, Secret, UrlPath, WebSocketUrlText
from config.problems import ConfigValueError, ModeRequires


class FeishuConfig(ChannelConfigBase):
    type: Literal["feishu"] = Field("feishu", description="Channel kind: a Feishu/Lark app bot.")
    allow: list[AllowEntry] = allow_list_field("Open ids (ou_...)")
    app_id: str = Field(min_length=1, description="App ID of the Feishu/Lark app (cli_...).")
    app_secret: Secret = Field(description="App secret of the Feishu/Lark app.")
    mode: Literal["websocket", "webhook"] = Field(
        "websocket",
        description="Receive events over Feishu's long connection (no public URL needed) or "
        "as HTTP requests to webhook_path.",
    )
    encrypt_key: OptionalSecret = Field(
        None,
        description="Encrypt Key of the event subscription: decrypts events and checks "
        "X-Lark-Signature (required in webhook mode).",
    )
    verification_token: OptionalSecret = Field(
        None,
        description="Verification Token of the event subscription, checked in every webhook "
        "event (required in webhook mode).",
    )
    webhook_path: UrlPath = webhook_path_field("/feishu/events", "events (webhook mode)")
    base_url: HttpUrlText = Field(
        "https://open.feishu.cn",
        description="Open platform base URL; Lark: https://open.larksuite.com.",
    )
    require_mention: bool = Field(
        True, description="In group chats, answer only messages that mention the bot."
    )

    MODE_REQUIRES = tuple(
        ModeRequires(
            "webhook",
            key,
            f"add {key}: ${{{env}}} (from the app's Events and Callbacks page), "
            "or use mode: websocket",
            at=(key,),
        )
        for key, env in (
            ("encrypt_key", "FEISHU_ENCRYPT_KEY"),
            ("verification_token", "FEISHU_VERIFICATION_TOKEN"),
        )
    )


ENCODING_AES_KEY_LENGTH = 43


class WeComConfig(ChannelConfigBase):
    type: Literal["wecom"] = Field(
        "wecom", description="Channel kind: a WeCom (企业微信) self-built application."
    )
    allow: list[AllowEntry] = allow_list_field("WeCom user ids")
    corp_id: str = Field(min_length=1, description="Corp ID of the organisation (ww...).")
    agent_id: int = Field(description="AgentId of the application.")
    secret: Secret = Field(description="Secret of the application.")
    token: Secret = Field(description="Token of the application's callback (receive messages).")
    encoding_aes_key: Secret = Field(
        description="EncodingAESKey of the callback: 43 characters of base64."
    )
    webhook_path: UrlPath = webhook_path_field("/wecom/callback", "callbacks")
    api_base_url: HttpUrlText = Field(
        "https://qyapi.weixin.qq.com", description="WeCom server API base URL."
    )

    @field_validator("encoding_aes_key")
    @classmethod
    def _aes_key_shape(cls, value: SecretStr) -> SecretStr:
        text = value.get_secret_value()
        problem = "" if len(text) == ENCODING_AES_KEY_LENGTH else f"has {len(text)} characters"
        if not problem:
            try:
                base64.b64decode(text + "=", validate=True)
            except binascii.Error:
                problem = "is not base64"
        if problem:
            raise ConfigValueError(
                f"must be 43 characters of base64 but {problem}",
                "copy EncodingAESKey from the application's API receive settings",
            )
        return value


class WecomBotConfig(ChannelConfigBase):
    type: Literal["wecom-bot"] = Field(
        "wecom-bot", description="Channel kind: a WeCom (企业微信) AI bot over its websocket."
    )
    bot_id: str = Field(min_length=1, description="The AI bot's Bot ID from the WeCom admin.")
    secret: Secret = Field(description="The AI bot's Secret from the WeCom admin.")
    ws_url: WebSocketUrlText = Field(
        "wss://openws.work.weixin.qq.com", description="WeCom AI bot websocket URL."
    )


class QQBotConfig(ChannelConfigBase):
    type: Literal["qq-bot"] = Field("qq-bot", description="Channel kind: a QQ bot (API v2).")
    app_id: str = Field(min_length=1, description="AppID from the QQ bot open platform.")
    app_secret: Secret = Field(
        description="AppSecret: fetches access tokens and seeds the Ed25519 webhook key."
    )
    mode: Literal["webhook", "websocket"] = Field(
        "webhook",
        description="How events arrive: signed webhooks on the gateway's HTTP server, or the "
        "websocket gateway QQ is retiring.",
    )
    webhook_path: UrlPath = webhook_path_field("/qq/callback", "QQ's signed events")
    api_base_url: HttpUrlText = Field(
        "https://api.sgroup.qq.com", description="QQ bot OpenAPI base URL."
    )
    token_url: HttpUrlText = Field(
        "https://bots.qq.com/app/getAppAccessToken",
        description="Where access tokens are fetched from.",
    )
    keyboard: bool = Field(
        False,
        description="Show a reply's buttons as a QQ keyboard under a Markdown message; only "
        "for a bot QQ granted Markdown and custom keyboard permission. false: a numbered list "
        "ends the reply.",
    )
