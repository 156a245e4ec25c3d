"""What the configuration tests share: profile files written from YAML text (the `write_yaml`
fixture of tests/config), and the problems loading one reports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from config import ConfigError, ConfigProblem, load_profile

#: `write_yaml(name, text)`: the path of the file written.
WriteYaml = Callable[[str, str], Path]


#: `problems_in(text)`: the problems loading a profile of that YAML text reports.
ProblemsIn = Callable[[str], list[ConfigProblem]]


def problems_of(path: Path, env: dict[str, str] | None = None) -> list[ConfigProblem]:
    """The problems loading the profile at `path` reports (with `env` as the environment)."""
    with pytest.raises(ConfigError) as caught:
        load_profile(path, env=env or {})
    return caught.value.problems
