"""What makes a valid configuration unusable on this machine, for `check` and `doctor` to say
before `run` fails on it: two listeners on one port, a data directory that cannot be created or
written.

The listeners are the health server (`http`, which also serves every channel's webhooks) and
each `api` channel. Nothing is created here: a directory that does not exist yet is judged by
its nearest existing ancestor, where `run` would create it.

The commonest wrong file, a profile passed where gateway.yaml belongs
(`-c examples/more/assistant.yaml`), would otherwise list every profile key as unknown in
gateway.yaml. When the file's top-level keys are a profile's and none is gateway.yaml's, the
problems are replaced by one that says so.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from config import (
    ApiChannelConfig,
    ConfigError,
    ConfigProblem,
    GatewayConfig,
    LoadedConfig,
    ProfileConfig,
)
from config.problems import DataPath
from config.yaml_source import YamlDocument, read_yaml

_PROFILE_KEYS = frozenset(ProfileConfig.model_fields)
_GATEWAY_KEYS = frozenset(GatewayConfig.model_fields)


def looks_like_profile(path: Path) -> bool:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    if not isinstance(data, dict) or not data:
        return False
    keys = {str(key) for key in data}
    return bool(keys & _PROFILE_KEYS) and not keys & _GATEWAY_KEYS


def explain_config_error(path: Path, error: ConfigError) -> ConfigError:
    """`error`, or one clear problem when `path` is a profile rather than gateway.yaml."""
    if not looks_like_profile(path):
        return error
    return ConfigError(
        [
            ConfigProblem(
                path,
                None,
                "this looks like a profile (one bot), not a gateway.yaml",
                "pass gateway.yaml, whose profiles_dir holds this file "
                "(`octos-gateway init` writes both)",
            )
        ]
    )


def usability_problems(loaded: LoadedConfig) -> list[ConfigProblem]:
    """Every listener clash and unusable data directory, each at its file and line."""
    documents = _Documents()
    return listener_clashes(loaded, documents) + data_dir_problems(loaded, documents)


@dataclass(frozen=True, slots=True)
class _Listener:
    what: str
    host: str
    port: int
    file: Path
    line: int | None

    @property
    def place(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else str(self.file)


class _Documents:
    """Each configuration file read once more, for the lines of its keys (the loaded models
    keep values, not where they were written)."""

    def __init__(self) -> None:
        self._read: dict[Path, YamlDocument] = {}

    def line(self, file: Path | None, path: DataPath) -> int | None:
        """The line of `path`, or of the nearest enclosing key written in `file`."""
        if file is None:
            return None
        if file not in self._read:
            self._read[file] = read_yaml(file)
        key_lines = self._read[file].key_lines
        for length in range(len(path), 0, -1):
            if (line := key_lines.get(path[:length])) is not None:
                return line
        return None


def _config_file(loaded: LoadedConfig) -> Path:
    return loaded.source or Path("(embedded default)")


def _listeners(loaded: LoadedConfig, documents: _Documents) -> list[_Listener]:
    http = loaded.gateway.http
    found = [
        _Listener(
            "the health and status server (http)",
            http.host,
            http.port,
            _config_file(loaded),
            documents.line(loaded.source, ("http", "port")),
        )
    ]
    for profile_id, profile in loaded.profiles.items():
        source = loaded.profile_sources.get(profile_id)
        for index, channel in enumerate(profile.channels):
            if isinstance(channel, ApiChannelConfig):
                found.append(
                    _Listener(
                        f"profile {profile_id}'s api channel",
                        channel.host,
                        channel.port,
                        source or _config_file(loaded),
                        documents.line(source, ("channels", index, "port")),
                    )
                )
    return found


def listener_clashes(
    loaded: LoadedConfig, documents: _Documents | None = None
) -> list[ConfigProblem]:
    """A problem at each listener whose port an earlier one already listens on."""
    problems: list[ConfigProblem] = []
    earlier: list[_Listener] = []
    for listener in _listeners(loaded, documents or _Documents()):
        # Port 0 picks a free port at start: it never clashes.
        first = next(
            (
                other
                for other in earlier
                if listener.port != 0
                and other.port == listener.port
                and _addresses_overlap(other.host, listener.host)
            ),
            None,
        )
        if first is not None:
            problems.append(
                ConfigProblem(
                    listener.file,
                    listener.line,
                    f"port {listener.port} of {listener.what} on {listener.host} is also the "
                    f"port of {first.what} on {first.host} ({first.place}): the second to "
                    "start could not listen",
                    "give each listener a port of its own (0 picks a free one)",
                )
            )
        earlier.append(listener)
    return problems


def _addresses_overlap(first: str, second: str) -> bool:
    """Whether listening on both addresses with one port would collide."""
    one, other = _canonical(first), _canonical(second)
    if one == other or "::" in (one, other):  # `::` takes IPv4 as well (dual stack)
        return True
    if "0.0.0.0" in (one, other):
        specific = other if one == "0.0.0.0" else one
        return ":" not in specific  # any IPv4 address, or a name
    return False


def _canonical(host: str) -> str:
    if host in ("", "*"):
        return "0.0.0.0"
    if host == "localhost":
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.lower()


def data_dir_problems(
    loaded: LoadedConfig, documents: _Documents | None = None
) -> list[ConfigProblem]:
    """A problem for each place that keeps profiles' data directories from being created or
    written, naming the profiles it stops."""
    data_dir = loaded.gateway.data_dir
    blocked: dict[Path, tuple[str, str, list[str]]] = {}
    for profile_id in loaded.profiles:
        found = _unusable(data_dir / profile_id)
        if found is not None:
            place, reason, fix = found
            blocked.setdefault(place, (reason, fix, []))[2].append(profile_id)
    line = (documents or _Documents()).line(loaded.source, ("data_dir",))
    return [
        ConfigProblem(
            _config_file(loaded),
            line,
            f"data_dir {data_dir} cannot hold the data of {_profiles(ids)}: {reason}",
            f"{fix}, or set data_dir in gateway.yaml to a directory this user may write",
        )
        for reason, fix, ids in blocked.values()
    ]


def _profiles(ids: list[str]) -> str:
    return f"profile {ids[0]}" if len(ids) == 1 else f"profiles {', '.join(ids)}"


def _unusable(directory: Path) -> tuple[Path, str, str] | None:
    """The place that keeps `directory` from being created and written, why, and the fix;
    None when nothing does. Judged by os.access, which root passes whatever the mode bits say
    (it may indeed write there)."""
    place = directory
    while not os.path.lexists(place) and place.parent != place:
        place = place.parent
    if not place.is_dir():
        return place, f"{place} is not a directory", "move it away"
    if not os.access(place, os.W_OK | os.X_OK):
        return place, f"{place} is not writable by this user", "let this user write it"
    return None
