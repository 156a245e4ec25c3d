"""The channels with no platform behind them: the HTTP API with its web chat page
(`type: api`), the local terminal (`type: cli`) and a channel class of your own (`type: plugin`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveFloat

from config.channels.base import ChannelConfigBase
from config.common import (
    AllowEntry,
    AtLeastOne,
    OptionalSecret,
    Port,
)
from config.http_limits import (
    AllowedHost,
    HttpLimitsConfig,
    allowed_hosts_field,
    limits_field,
)

#: Where the HTTP API and its web chat listen unless configured otherwise.
DEFAULT_API_PORT = 8091


def _everyone() -> list[AllowEntry]:
    return ["*"]


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
    max_body_bytes: AtLeastOne = Field(
        1_000_000, description="Largest request body accepted, in bytes."
    )
    allowed_hosts: list[AllowedHost] = allowed_hosts_field()
    reply_timeout_s: PositiveFloat = Field(
        300.0,
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
