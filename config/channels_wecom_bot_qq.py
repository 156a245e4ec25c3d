"""Config models of the WeCom AI bot (`type: wecom-bot`) and the QQ bot (`type: qq-bot`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from config.channel_base import ChannelConfigBase, webhook_path_field
from config.common import HttpUrlText, Secret, UrlPath, WebSocketUrlText


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
