"""The Matrix channel's configuration (`type: matrix`)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from config.channel_base import ChannelConfigBase
from config.common import HttpUrlText, Secret
from config.problems import ConfigValueError

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
