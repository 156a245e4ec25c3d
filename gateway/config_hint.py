"""Clearer errors for the commonest wrong file: a profile passed where gateway.yaml belongs.

`-c examples/more/assistant.yaml` would otherwise list every profile key as unknown in
gateway.yaml. When the file's top-level keys are a profile's and none is gateway.yaml's, the
problems are replaced by one that says so.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from config import ConfigError, ConfigProblem, GatewayConfig, ProfileConfig

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
