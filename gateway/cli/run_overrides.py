"""`run --api-port/--api-host/--http-port`: listen elsewhere without editing the config.

The embedded default (no `-c`) has no file to edit, and a busy 8091 must not leave a daemon
running without its web chat: the API ports are checked before the daemon starts (by `cli`, for a
process that runs channels: a worker binds none), and a busy one exits with the same status (69,
EX_UNAVAILABLE) as a busy health port, saying which flag helps. A moved api channel is warned of
as the YAML's would be (`--api-host 0.0.0.0` without `auth_token`).
"""

from __future__ import annotations

import errno
import socket
from dataclasses import replace
from pathlib import Path

from config import (
    ApiChannelConfig,
    ConfigError,
    ConfigProblem,
    ConfigWarning,
    LoadedConfig,
    ProfileConfig,
)


def with_listen_overrides(
    loaded: LoadedConfig,
    *,
    api_host: str | None = None,
    api_port: int | None = None,
    http_host: str | None = None,
    http_port: int | None = None,
) -> LoadedConfig:
    """A copy listening where the flags say; ConfigError when --api-* has no single target."""
    gateway = loaded.gateway
    if http_host is not None or http_port is not None:
        http = gateway.http.model_copy(
            update={
                "host": http_host if http_host is not None else gateway.http.host,
                "port": http_port if http_port is not None else gateway.http.port,
            }
        )
        gateway = gateway.model_copy(update={"http": http})
    profiles = dict(loaded.profiles)
    warnings = loaded.warnings
    if api_host is not None or api_port is not None:
        targets = [
            (pid, index)
            for pid, profile in profiles.items()
            for index, channel in enumerate(profile.channels)
            if isinstance(channel, ApiChannelConfig)
        ]
        if len(targets) != 1:
            raise ConfigError(
                [
                    ConfigProblem(
                        loaded.source or Path("(embedded default)"),
                        None,
                        f"--api-host/--api-port need exactly one api channel, found {len(targets)}",
                        "set host and port in the api channels of the profiles instead",
                    )
                ]
            )
        pid, index = targets[0]
        profiles[pid] = _moved(profiles[pid], index, api_host, api_port)
        warnings = _warnings_after_move(loaded, pid, profiles[pid])
    return replace(loaded, gateway=gateway, profiles=profiles, warnings=warnings)


def _warnings_after_move(
    loaded: LoadedConfig, pid: str, moved: ProfileConfig
) -> list[ConfigWarning]:
    """The configuration's warnings with profile `pid`'s as its new address makes them: an api
    channel moved beyond loopback without auth_token is warned of, one moved back is not."""
    source = loaded.profile_sources.get(pid)
    before = {warning.message for warning in loaded.profiles[pid].warnings()}
    after = [warning.message for warning in moved.warnings()]
    kept = [
        warning
        for warning in loaded.warnings
        if warning.file != source or warning.message not in before or warning.message in after
    ]
    return kept + [
        ConfigWarning(source, None, message) for message in after if message not in before
    ]


def _moved(profile: ProfileConfig, index: int, host: str | None, port: int | None) -> ProfileConfig:
    channel = profile.channels[index]
    assert isinstance(channel, ApiChannelConfig)
    update: dict[str, object] = {}
    if host is not None:
        update["host"] = host
    if port is not None:
        update["port"] = port
    channels = list(profile.channels)
    channels[index] = channel.model_copy(update=update)
    return profile.model_copy(update={"channels": channels})


def busy_api_port(loaded: LoadedConfig) -> str | None:
    """What to tell the user when an api channel's port is taken; None when all are free."""
    for pid, profile in loaded.profiles.items():
        for channel in profile.channels:
            if not isinstance(channel, ApiChannelConfig) or channel.port == 0:
                continue
            error = bind_error(channel.host, channel.port)
            if error is not None and error.errno == errno.EADDRINUSE:
                return (
                    f"cannot listen on {channel.host}:{channel.port} for the web chat and API of "
                    f"profile {pid}: the port is in use; stop what uses it, or choose another "
                    "with --api-port (or the api channel's port)"
                )
    return None


def bind_error(host: str, port: int) -> OSError | None:
    """The error binding host:port now gives, or None when it is free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            return error
    return None
