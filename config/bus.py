"""gateway.yaml `bus`: where messages between channels and agents travel.

`memory` (the default) is the in-process bus of one daemon; `nats` runs the same contract over
NATS JetStream, so ingress processes (the channels) and worker processes (the agents) scale
apart. A cluster keeps its sessions in PostgreSQL (`store: {backend: postgres}`).
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator

from config.common import AtLeastOne, ConfigModel

NATS_SCHEMES = ("nats", "tls", "ws", "wss")
#: A stream name: letters, digits, `_` and `-` (JetStream forbids `.`, `*`, `>` and spaces).
_STREAM_PREFIX = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


def redact_url(url: str) -> str:
    """The URL with its password (and a token in the user part) replaced by `***`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if "@" not in parts.netloc:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, colon, _password = userinfo.partition(":")
    shown = f"{user}:***" if colon else "***"
    return urlunsplit((parts.scheme, f"{shown}@{hostport}", parts.path, parts.query, ""))


class NatsConfig(ConfigModel):
    url: SecretStr = Field(
        SecretStr("nats://127.0.0.1:4222"),
        description="NATS server URL (default nats://127.0.0.1:4222), or several comma "
        "separated; nats://user:password@host:4222 carries credentials, never logged.",
    )
    stream_prefix: str = Field(
        "OCTOS",
        description="Prefix of the JetStream streams ({prefix}_IN, {prefix}_OUT, {prefix}_DEAD) "
        "and of every subject; letters, digits, _ and -.",
    )
    partitions: int = Field(
        16,
        ge=1,
        le=1024,
        description="Partitions of the inbound and outbound streams: a chat's turns and "
        "deliveries run in order within its partition, partitions in parallel. Drain the "
        "streams before changing it.",
    )
    connect_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="Seconds to wait at start-up for the NATS server and its JetStream (a "
        "cluster started with the gateway elects its leader meanwhile): `run` tries again "
        "until then, /readyz answering 503, and exits 69 after.",
    )
    ack_wait_s: float = Field(
        30.0,
        ge=1,
        le=3600,
        description="Seconds a worker may hold a message without a heartbeat before JetStream "
        "gives it to another worker (long turns send heartbeats).",
    )
    max_deliver: int = Field(
        5,
        ge=2,
        le=100,
        description="Deliveries of an inbound message before it goes to the dead letters.",
    )
    retry_backoff_s: list[float] = Field(
        default_factory=lambda: [1.0, 5.0, 15.0],
        description="Waits before the 2nd, 3rd, ... delivery of a failed message (the last "
        "repeats).",
    )
    duplicate_window_s: float = Field(
        600.0,
        ge=1,
        le=86400,
        description="How long JetStream remembers a Nats-Msg-Id (a platform's retry within it "
        "is dropped at publish; later ones are caught by the worker's PostgreSQL record).",
    )
    worker_max_turns: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="Turns one worker process runs at once, over all partitions (the agent's "
        "capacity per worker); more workers add more. Unset: one per partition.",
    )
    fetch_wait_s: float = Field(
        5.0,
        gt=0,
        le=60,
        description="How long a fetch waits on an empty partition before it asks again; in a "
        "bounded worker, how long an idle worker waits for a new message's notice before it "
        "looks again (retries after their backoff come without one).",
    )
    replicas: int = Field(
        1, ge=1, le=5, description="Replicas of each stream (3 in production clusters)."
    )

    @field_validator("url")
    @classmethod
    def _nats_url(cls, value: SecretStr) -> SecretStr:
        for url in value.get_secret_value().split(","):
            parts = urlsplit(url.strip())
            if parts.scheme not in NATS_SCHEMES or not parts.hostname:
                raise ValueError(
                    f"must be a URL like nats://127.0.0.1:4222 (got {redact_url(url.strip())!r})"
                )
        return value

    @field_validator("stream_prefix")
    @classmethod
    def _stream_name(cls, value: str) -> str:
        if not _STREAM_PREFIX.match(value):
            raise ValueError("must be 1-32 letters, digits, _ or - (it names JetStream streams)")
        return value

    @field_validator("retry_backoff_s")
    @classmethod
    def _positive_waits(cls, value: list[float]) -> list[float]:
        if not value or any(wait <= 0 for wait in value):
            raise ValueError("must be a non-empty list of positive seconds")
        return value

    @property
    def servers(self) -> list[str]:
        return [url.strip() for url in self.url.get_secret_value().split(",")]

    @property
    def redacted_url(self) -> str:
        return ",".join(redact_url(url) for url in self.servers)


class BusConfig(ConfigModel):
    backend: Literal["memory", "nats"] = Field(
        "memory",
        description="Where messages between channels and agents travel: memory (one process) "
        "or nats (JetStream; ingress and worker processes, needs store backend postgres and "
        "the `nats` extra).",
    )
    capacity: AtLeastOne = Field(
        4096,
        description="Messages each bus queue holds before senders wait (outbound in one "
        "process, replies_per_channel bounds each channel's replies instead).",
    )
    replies_per_channel: AtLeastOne = Field(
        1024,
        description="One process (backend memory): replies of one channel waiting for "
        "delivery (its platform down, say) before that channel's further replies wait in "
        "their turns; every other channel's go on.",
    )
    nats: NatsConfig = Field(
        default_factory=NatsConfig, description="The NATS JetStream server (backend nats)."
    )
