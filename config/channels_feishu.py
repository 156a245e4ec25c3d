"""The Feishu/Lark channel's configuration (`type: feishu`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from config.channel_base import ChannelConfigBase, allow_list_field, webhook_path_field
from config.common import AllowEntry, HttpUrlText, OptionalSecret, Secret, UrlPath
from config.problems import ModeRequires


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
