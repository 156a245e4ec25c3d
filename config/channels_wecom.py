"""The WeCom (企业微信) application channel's configuration (`type: wecom`)."""

from __future__ import annotations

import base64
import binascii
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from config.channel_base import ChannelConfigBase, allow_list_field, webhook_path_field
from config.common import AllowEntry, HttpUrlText, Secret, UrlPath
from config.problems import ConfigValueError

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
