"""gateway.yaml `store`: where sessions live, the JSONL files (default) or PostgreSQL."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from config.common import ConfigModel

DSN_SCHEMES = ("postgresql", "postgres")


def redact_dsn(dsn: str) -> str:
    """The DSN with its password (in the netloc or a `password=` parameter) replaced by `***`."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unparsable DSN>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        netloc = f"{user}{':***' if colon else ''}@{hostport}"
    query = "&".join(
        "password=***" if pair.lower().startswith("password=") else pair
        for pair in parts.query.split("&")
        if pair
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class StoreConfig(ConfigModel):
    backend: Literal["jsonl", "postgres"] = Field(
        "jsonl",
        description="Where sessions are stored: jsonl (append-only files in data_dir) or "
        "postgres (a PostgreSQL database; needs `dsn` and the `postgres` extra).",
    )
    dsn: SecretStr | None = Field(
        None,
        description="PostgreSQL connection URL, postgresql://user:password@host:5432/db "
        "(required with backend postgres; its password is never logged).",
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, le=300, description="Seconds to wait for PostgreSQL to accept a connection."
    )
    pool_size: int = Field(
        4, ge=1, le=100, description="PostgreSQL connections each profile keeps open at most."
    )

    @field_validator("dsn")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        text = value.get_secret_value()
        if not text:
            raise ValueError("must not be empty")
        parts = urlsplit(text)
        if parts.scheme not in DSN_SCHEMES or not parts.hostname:
            raise ValueError(
                "must be a URL like postgresql://user:password@host:5432/db "
                f"(got {redact_dsn(text)!r})"
            )
        return value

    @model_validator(mode="after")
    def _dsn_for_postgres(self) -> StoreConfig:
        if self.backend == "postgres" and self.dsn is None:
            raise ValueError(
                "store.dsn is required with backend postgres: "
                "dsn: postgresql://user:password@host:5432/db"
            )
        return self

    @property
    def redacted_dsn(self) -> str:
        return "" if self.dsn is None else redact_dsn(self.dsn.get_secret_value())
