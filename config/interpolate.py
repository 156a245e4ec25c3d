"""`${VAR}` and `${VAR:-default}` in YAML strings, read from an environment mapping.

Semantics follow the shell and docker compose: `${VAR:-default}` uses the default when VAR is
unset or empty; `$${` writes a literal `${`. A `$` not followed by `{` is left alone, so
passwords with dollar signs need no escaping.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from config.problems import DataPath

#: The file beside gateway.yaml that every command reads variables from (`gateway.cli.args`).
ENV_FILE = ".env"

_REFERENCE = re.compile(r"\$\$\{|\$\{(?P<body>[^}]*)(?P<close>\})?")
_BODY = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?", re.DOTALL)


@dataclass(frozen=True, slots=True)
class InterpolationProblem:
    """A reference that could not be expanded, at the path of the string that holds it."""

    path: DataPath
    message: str
    suggestion: str


def expand_variables(
    text: str, env: Mapping[str, str], path: DataPath = (), *, env_file: Path | None = None
) -> tuple[str, list[InterpolationProblem]]:
    """Expand every reference in `text`; unexpandable ones are reported and left as written.

    `env_file`: the `.env` the variables are also read from, named in the advice for an unset
    one (whether it exists or not: it is where `init` tells the user to put secrets).
    """
    problems: list[InterpolationProblem] = []
    pieces: list[str] = []
    position = 0
    for match in _REFERENCE.finditer(text):
        pieces.append(text[position : match.start()])
        position = match.end()
        pieces.append(_expand_one(match, env, path, problems, env_file))
    pieces.append(text[position:])
    return "".join(pieces), problems


def _expand_one(
    match: re.Match[str],
    env: Mapping[str, str],
    path: DataPath,
    problems: list[InterpolationProblem],
    env_file: Path | None,
) -> str:
    if match.group(0) == "$${":
        return "${"
    body = match.group("body")
    if match.group("close") is None:
        problems.append(
            InterpolationProblem(
                path, "'${' is not closed by '}'", "write ${NAME}, or $${ for a literal '${'"
            )
        )
        return match.group(0)
    reference = _BODY.fullmatch(body)
    if reference is None:
        problems.append(
            InterpolationProblem(
                path,
                # The text is not quoted: it may be part of a password that needed `$${`.
                "invalid variable reference",
                "write ${NAME} or ${NAME:-default}; names are letters, digits and _",
            )
        )
        return match.group(0)
    name = reference.group("name")
    default = reference.group("default")
    value = env.get(name)
    if default is not None:
        return value if value else default
    if value is None:
        problems.append(
            InterpolationProblem(
                path,
                f"environment variable '{name}' is not set",
                f"set {name} in the environment{f' or in {env_file}' if env_file else ''}, "
                f"or give a default with ${{{name}:-default}}",
            )
        )
        return match.group(0)
    return value


@dataclass(slots=True)
class Interpolated:
    """A YAML tree after expansion."""

    data: object
    problems: list[InterpolationProblem] = field(default_factory=list)
    #: Paths of the strings that had a variable in them: their values may be secrets that
    #: error messages must not quote.
    expanded: set[DataPath] = field(default_factory=set)


def interpolate_tree(
    data: object, env: Mapping[str, str], *, env_file: Path | None = None
) -> Interpolated:
    """Expand references in every string value of a YAML tree (keys are left as written)."""
    result = Interpolated(data=None)
    result.data = _expand_tree(data, env, (), result, env_file)
    return result


def _expand_tree(
    data: object, env: Mapping[str, str], path: DataPath, out: Interpolated, env_file: Path | None
) -> object:
    if isinstance(data, str):
        expanded, problems = expand_variables(data, env, path, env_file=env_file)
        out.problems.extend(problems)
        if expanded != data or problems:
            out.expanded.add(path)
        return expanded
    if isinstance(data, dict):
        return {
            key: _expand_tree(value, env, (*path, str(key)), out, env_file)
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [
            _expand_tree(value, env, (*path, index), out, env_file)
            for index, value in enumerate(data)
        ]
    return data
