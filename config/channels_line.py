"""The LINE channel's configuration (`type: line`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from config.channel_base import ChannelConfigBase, webhook_path_field
from config.common import HttpUrlText, Secret, UrlPath


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
