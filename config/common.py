"""The base of every configuration model and the field types they share."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    StrictInt,
)


def resolve_path(path: Path, base_dir: Path) -> Path:
    """`path` with `~` expanded, and against `base_dir` (gateway.yaml's directory) if relative."""
    expanded = path.expanduser()
    return expanded if expanded.is_absolute() else base_dir / expanded


class ConfigModel(BaseModel):
    """Unknown keys are errors (a typo must not pass silently); loaded configs are immutable.

    Every model declares its keys in one form, `key: Type = Field(default, bounds,
    description=...)`, and its checks as validators raising `ConfigValueError`: the
    descriptions are the generated reference (`python -m config.describe`). What keys share
    in meaning is a type of this module or a helper of `config.channels.base`, not a copied
    declaration.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)


def _url_with_scheme(*schemes: str) -> Callable[[str], str]:
    allowed = " or ".join(f"{scheme}://" for scheme in schemes)

    def check(url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in schemes or not parts.netloc:
            raise ValueError(f"must be an absolute URL starting with {allowed}")
        return url

    return check


def _path_on_server(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError("must be a URL path starting with '/'")
    return path


#: An http(s) URL kept exactly as written: some bases are prefixes (Telegram's ends in `/bot`
#: and has the token appended), so no normalisation such as an added trailing slash.
HttpUrlText = Annotated[str, AfterValidator(_url_with_scheme("http", "https"))]
WebSocketUrlText = Annotated[str, AfterValidator(_url_with_scheme("ws", "wss"))]
UrlPath = Annotated[str, AfterValidator(_path_on_server)]

#: A credential: never shown by repr/str, and an empty one (an unset `${VAR:-}`) is an error.
Secret = Annotated[SecretStr, Field(min_length=1)]


def _empty_is_none(value: object) -> object:
    return None if value == "" else value


#: An optional credential: `key: ${VAR:-}` with VAR unset or empty means "not set", which is
#: how a YAML file makes a credential optional through the environment.
OptionalSecret = Annotated[Secret | None, BeforeValidator(_empty_is_none)]
#: An optional URL, empty meaning unset for the same reason.
OptionalHttpUrlText = Annotated[HttpUrlText | None, BeforeValidator(_empty_is_none)]

#: A TCP port; 0 asks the operating system for a free one.
Port = Annotated[int, Field(ge=0, le=65535)]

#: A count, size or limit that must allow at least one (messages, connections, bytes).
AtLeastOne = Annotated[int, Field(ge=1)]

#: An allow-list entry: a user id (number or string) or a username. Strict int, so a YAML
#: boolean (`yes`) is rejected rather than read as 1.
AllowEntry = str | StrictInt


def is_loopback_host(host: str) -> bool:
    """Whether a listen address is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name that may resolve to anything
