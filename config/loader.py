"""Reading gateway.yaml and the profiles it points to, collecting every problem.

This is the only place that reads configuration files or the environment; everything below
the CLI receives the typed result. Reading is synchronous file I/O: call it at start-up, or
through `asyncio.to_thread` from a running loop (a SIGHUP reload).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from bus import is_channel_name
from config.agents import EchoAgentConfig
from config.channels import DEFAULT_API_PORT, ApiChannelConfig
from config.explain import explain_validation_error
from config.gateway import GatewayConfig
from config.interpolate import ENV_FILE, interpolate_tree
from config.problems import ConfigError, ConfigProblem, ConfigWarning, format_path
from config.profile import ProfileConfig
from config.yaml_source import YAML_SUFFIXES, YamlDocument, read_yaml

_PROFILE_ID = re.compile(r"[A-Za-z0-9_-]+")
DEFAULT_PROFILE_ID = "default"
#: The embedded default's echo agent: a few pieces far enough apart to be seen growing.
EMBEDDED_ECHO_DELAY_S = 0.15
EMBEDDED_ECHO_PIECES = 6


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A whole validated configuration: the daemon's settings and every profile."""

    gateway: GatewayConfig
    #: Profiles by id, in id order.
    profiles: dict[str, ProfileConfig]
    #: The file each profile came from (absent for the embedded default).
    profile_sources: dict[str, Path] = field(default_factory=dict)
    warnings: list[ConfigWarning] = field(default_factory=list)
    #: gateway.yaml, or None for the embedded default.
    source: Path | None = None

    def with_data_dir(self, data_dir: Path) -> LoadedConfig:
        """A copy whose data directory is `data_dir` (the CLI's `--data-dir` override)."""
        gateway = self.gateway.model_copy(update={"data_dir": data_dir})
        return replace(self, gateway=gateway)


ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass(slots=True)
class _Validated(Generic[ModelT]):
    model: ModelT | None
    document: YamlDocument
    problems: list[ConfigProblem]


def _validate(
    path: Path, model: type[ModelT], env: Mapping[str, str], env_file: Path | None
) -> _Validated[ModelT]:
    document = read_yaml(path)
    problems = list(document.problems)
    if not document.parsed:
        return _Validated(None, document, problems)
    data = {} if document.data is None else document.data
    if not isinstance(data, dict):
        problems.append(
            ConfigProblem(
                path,
                document.line_of(()),
                "expected a mapping of keys to values at the top level",
                "write `key: value` lines",
            )
        )
        return _Validated(None, document, problems)
    interpolated = interpolate_tree(data, env, env_file=env_file)
    for problem in interpolated.problems:
        line = document.value_lines.get(problem.path) or document.line_of(problem.path)
        message = f"{problem.message} (in {format_path(problem.path)})"
        problems.append(ConfigProblem(path, line, message, problem.suggestion))
    try:
        validated = model.model_validate(interpolated.data)
    except ValidationError as error:
        skip = {problem.path for problem in interpolated.problems}
        problems.extend(
            explain_validation_error(error, model, document, skip, interpolated.expanded)
        )
        return _Validated(None, document, _in_line_order(problems))
    if problems:
        return _Validated(None, document, _in_line_order(problems))
    return _Validated(validated, document, problems)


def _in_line_order(problems: list[ConfigProblem]) -> list[ConfigProblem]:
    return sorted(problems, key=lambda problem: problem.line or 0)


def _profile_id_problem(path: Path) -> ConfigProblem | None:
    profile_id = path.stem
    if not _PROFILE_ID.fullmatch(profile_id):
        return ConfigProblem(
            path,
            None,
            f"profile id '{profile_id}' (the file name) may use only A-Z, a-z, 0-9, _ and -",
            "rename the file",
        )
    if is_channel_name(profile_id):
        return ConfigProblem(
            path,
            None,
            f"profile id '{profile_id}' (the file name) is also a channel name, which makes "
            "session keys ambiguous",
            f"rename the file, e.g. to {profile_id}-bot{path.suffix}",
        )
    return None


def _load_profile(
    path: Path, env: Mapping[str, str], env_file: Path | None = None
) -> tuple[ProfileConfig | None, list[ConfigProblem], list[ConfigWarning]]:
    id_problem = _profile_id_problem(path)
    result = _validate(path, ProfileConfig, env, env_file)
    problems = [id_problem, *result.problems] if id_problem else result.problems
    if result.model is None or problems:
        return None, problems, []
    warnings = [
        ConfigWarning(path, result.document.line_of(warning.at), warning.message)
        for warning in result.model.warnings()
    ]
    return result.model, [], warnings


def load_profile(path: Path, env: Mapping[str, str] | None = None) -> ProfileConfig:
    """Load one profile file; raises ConfigError listing every problem in it."""
    profile, problems, _ = _load_profile(path, os.environ if env is None else env)
    if profile is None:
        raise ConfigError(problems)
    return profile


def _profile_files(
    profiles_dir: Path, gateway_file: Path
) -> tuple[list[Path], list[ConfigProblem]]:
    if not profiles_dir.is_dir():
        state = "is not a directory" if profiles_dir.exists() else "does not exist"
        return [], [
            ConfigProblem(
                gateway_file,
                None,
                f"profiles_dir {profiles_dir} {state}",
                "create it with one <id>.yaml per bot, or set profiles_dir in gateway.yaml",
            )
        ]
    files = sorted(
        entry
        for entry in profiles_dir.iterdir()
        if entry.suffix in YAML_SUFFIXES and not entry.name.startswith(".") and entry.is_file()
    )
    problems: list[ConfigProblem] = []
    seen: dict[str, Path] = {}
    for entry in files:
        if entry.stem in seen:
            problems.append(
                ConfigProblem(
                    entry,
                    None,
                    f"profile '{entry.stem}' is also defined by {seen[entry.stem].name}",
                    "keep one of the two files",
                )
            )
        seen.setdefault(entry.stem, entry)
    if not files:
        problems.append(
            ConfigProblem(
                gateway_file,
                None,
                f"no profiles in profiles_dir {profiles_dir}",
                "add one <id>.yaml file per bot",
            )
        )
    return list(seen.values()), problems


def load_gateway(path: Path, env: Mapping[str, str] | None = None) -> LoadedConfig:
    """Load gateway.yaml and every profile in its profiles_dir.

    Raises ConfigError with the problems of all files together, so one `check` run shows
    everything to fix.
    """
    environment = os.environ if env is None else env
    base_dir = path.absolute().parent
    # Named as the user named gateway.yaml: where `init` told them to put the secrets.
    env_file = path.parent / ENV_FILE
    result = _validate(path, GatewayConfig, environment, env_file)
    problems = list(result.problems)
    if not result.document.parsed:
        # Without a readable gateway.yaml the profiles' location is unknown.
        raise ConfigError(problems)
    gateway = (result.model or _fallback_gateway(result.document)).resolve_paths(base_dir)
    files, file_problems = _profile_files(gateway.profiles_dir, path)
    problems.extend(file_problems)
    profiles: dict[str, ProfileConfig] = {}
    sources: dict[str, Path] = {}
    warnings: list[ConfigWarning] = []
    for profile_path in files:
        profile, profile_problems, profile_warnings = _load_profile(
            profile_path, environment, env_file
        )
        problems.extend(profile_problems)
        warnings.extend(profile_warnings)
        if profile is not None:
            profiles[profile_path.stem] = profile.resolve_paths(base_dir)
            sources[profile_path.stem] = profile_path
    if problems:
        raise ConfigError(problems)
    ordered = dict(sorted(profiles.items()))
    return LoadedConfig(gateway, ordered, sources, warnings, source=path)


def _fallback_gateway(document: YamlDocument) -> GatewayConfig:
    # gateway.yaml has errors, but its profiles are still checked so that one run reports
    # everything: use its profiles_dir if that much is readable.
    data = document.data
    if isinstance(data, dict) and isinstance(data.get("profiles_dir"), str):
        return GatewayConfig(profiles_dir=Path(data["profiles_dir"]))
    return GatewayConfig()


def default_config(data_dir: Path = Path("./data")) -> LoadedConfig:
    """The embedded configuration used when there is no gateway.yaml at all.

    One profile, `default`: the echo agent behind the HTTP API channel (and its web chat
    page) on 127.0.0.1:8091, open to everyone who can reach it; health on 127.0.0.1:8090.
    """
    gateway = GatewayConfig(data_dir=data_dir)
    profile = ProfileConfig(
        # Paced so that the web chat visibly streams (one snapshot per piece).
        agent=EchoAgentConfig(delay_s=EMBEDDED_ECHO_DELAY_S, pieces=EMBEDDED_ECHO_PIECES),
        channels=[ApiChannelConfig(host="127.0.0.1", port=DEFAULT_API_PORT)],
    )
    warnings = [ConfigWarning(None, None, warning.message) for warning in profile.warnings()]
    return LoadedConfig(gateway, {DEFAULT_PROFILE_ID: profile}, {}, warnings)
