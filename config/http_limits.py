"""What every HTTP listener of the daemon bounds: slow clients, connections, names it answers to.

Both listeners (the daemon's health and webhook server in gateway.yaml `http`, and each `api`
channel) take the same `limits`, and each has its own `allowed_hosts`.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import AfterValidator, Field, PositiveFloat

from config.common import AtLeastOne, ConfigModel

#: The names a loopback listener answers to by default (`*.localhost` is loopback by RFC 6761).
LOOPBACK_HOSTS = ("localhost", "*.localhost", "127.0.0.1", "::1")


class HttpLimitsConfig(ConfigModel):
    header_timeout_s: PositiveFloat = Field(
        10.0,
        description="Seconds a client has to send a request's headers (from connecting, or from "
        "the first byte of a kept-alive connection's next request); then it is closed.",
    )
    body_timeout_s: PositiveFloat = Field(
        30.0, description="Seconds a client has to send a request's whole body (408)."
    )
    keepalive_timeout_s: PositiveFloat = Field(
        15.0, description="Seconds an idle kept-alive connection stays open."
    )
    max_requests_per_connection: AtLeastOne = Field(
        1000, description="Requests served on one kept-alive connection before it closes."
    )
    max_connections: AtLeastOne = Field(
        256,
        description="Connections open at once on this listener; more are answered 503 and "
        "closed. Lowered to a quarter of the process's open-file limit when above it.",
    )
    accept_error_interval_s: PositiveFloat = Field(
        10.0,
        description="Repeated accept errors (out of file descriptors) are logged once per this "
        "many seconds, with their count.",
    )


def _host_name(text: str) -> str:
    name = text.strip().lower().rstrip(".")
    # What must be a plain name: all of it, or what follows a leading "*.".
    rest = "x" if name == "*" else name.removeprefix("*.")
    if ":" in rest:
        try:
            ipaddress.IPv6Address(rest)
        except ValueError:
            raise ValueError(
                f"{text!r} is not a host name: write the name alone, without scheme or port "
                "(e.g. chat.example.com)"
            ) from None
        return name
    if not rest or "/" in rest or "[" in rest or " " in rest or "*" in rest:
        raise ValueError(
            f"{text!r} is not a host name: write the name alone (chat.example.com), "
            '"*.example.com" for its subdomains or "*" for any'
        )
    return name


#: A name a listener answers to, as the `Host` header carries it (without the port).
AllowedHost = Annotated[str, AfterValidator(_host_name)]


def loopback_hosts() -> list[str]:
    """A fresh default for an `allowed_hosts` field."""
    return list(LOOPBACK_HOSTS)


_ALLOWED_HOSTS_DESCRIPTION = (
    "Host header names this listener answers to (a DNS-rebinding guard): exact names, "
    '"*.example.com" for subdomains, "*" for any; the listener\'s own `host` address is always '
    "allowed. Default: the loopback names."
)


def allowed_hosts_field(more: str = "") -> list[AllowedHost]:
    """`allowed_hosts`: the loopback names by default; `more` adds what this listener adds."""
    description = f"{_ALLOWED_HOSTS_DESCRIPTION} {more}" if more else _ALLOWED_HOSTS_DESCRIPTION
    return Field(default_factory=loopback_hosts, description=description)


def limits_field() -> HttpLimitsConfig:
    """`limits`: the same setting on both listeners, so declared once for both."""
    return Field(
        default_factory=HttpLimitsConfig,
        description="Timeouts and connection caps against slow or too many clients.",
    )
