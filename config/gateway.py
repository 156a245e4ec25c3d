"""gateway.yaml: the daemon's own settings, shared by all profiles."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from config.bus import BusConfig
from config.common import (
    AtLeastOne,
    ConfigModel,
    HttpUrlText,
    OptionalSecret,
    Port,
    is_loopback_host,
    resolve_path,
)
from config.http_limits import (
    AllowedHost,
    HttpLimitsConfig,
    allowed_hosts_field,
    limits_field,
)
from config.problems import ConfigValueError
from config.store import StoreConfig

LogLevel = Literal["debug", "info", "warning", "error", "critical"]
_LEVEL_ALIASES = {"warn": "warning", "fatal": "critical"}


#: Where the health and metrics server (and the status page) listens unless configured otherwise.
DEFAULT_HEALTH_PORT = 8090


class HttpConfig(ConfigModel):
    host: str = Field("127.0.0.1", description="Address of the health and metrics server.")
    port: Port = Field(
        DEFAULT_HEALTH_PORT,
        description="Port of the health and metrics server; 0 picks a free one.",
    )
    allowed_hosts: list[AllowedHost] = allowed_hosts_field(
        "The host names of the channels' `webhook_url`s are added; behind a proxy that keeps "
        "the public Host (Slack http mode), add that name."
    )
    max_body_bytes: AtLeastOne = Field(
        1_000_000, description="Largest webhook request body accepted, in bytes (413)."
    )
    limits: HttpLimitsConfig = limits_field()
    token: OptionalSecret = Field(
        None,
        description="Bearer token the status page (GET /) asks for (required to see it when "
        "host is not a loopback address), and /v1/messages always.",
    )
    allow_local_send: bool = Field(
        False,
        description="Let requests from this machine (loopback) use POST /v1/messages without "
        "the bearer token; every other request still needs http.token.",
    )
    public_url: HttpUrlText | None = Field(
        None,
        description="Base URL under which others reach this server (the links to attachments "
        "a webhook agent receives); unset: http://<host>:<port>.",
    )

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)


class LoggingConfig(ConfigModel):
    level: LogLevel = Field(
        "info", description="Least severe level logged: debug, info, warning, error, critical."
    )
    format: Literal["json", "console"] = Field(
        "console", description="json for log collectors, console for people at a terminal."
    )

    @field_validator("level", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        if isinstance(value, str):
            lowered = value.strip().lower()
            return _LEVEL_ALIASES.get(lowered, lowered)
        return value


class GatewayConfig(ConfigModel):
    data_dir: Path = Field(
        Path("./data"),
        description="Directory of session files and other state; relative to gateway.yaml.",
    )
    profiles_dir: Path = Field(
        Path("profiles"),
        description="Directory of profile files (<id>.yaml); relative to gateway.yaml.",
    )
    http: HttpConfig = Field(
        default_factory=HttpConfig, description="Health (/healthz, /readyz) and /metrics server."
    )
    logging: LoggingConfig = Field(
        default_factory=LoggingConfig, description="Log level and format."
    )
    bus: BusConfig = Field(
        default_factory=BusConfig, description="Message bus between channels and agents."
    )
    store: StoreConfig = Field(
        default_factory=StoreConfig,
        description="Session storage: JSONL files (default) or PostgreSQL.",
    )
    shutdown_grace_s: float = Field(
        10.0, ge=0, description="Seconds running turns get to finish after SIGTERM."
    )

    @model_validator(mode="after")
    def _cluster_needs_postgres(self) -> GatewayConfig:
        if self.bus.backend == "nats" and self.store.backend != "postgres":
            raise ConfigValueError(
                "bus backend nats needs sessions in PostgreSQL: every worker process must "
                "see every session",
                'add store: {backend: postgres, dsn: "postgresql://user@host:5432/db"}',
                at=("bus", "backend"),
            )
        return self

    def resolve_paths(self, base_dir: Path) -> GatewayConfig:
        """A copy whose relative paths (and `~`) are resolved against `base_dir`."""
        return self.model_copy(
            update={
                "data_dir": resolve_path(self.data_dir, base_dir),
                "profiles_dir": resolve_path(self.profiles_dir, base_dir),
            }
        )
