"""What can be wrong with a configuration, said for the person who wrote it.

Every problem names a file, a line where one is known, what is wrong and what to do about it.
None of these texts may echo a configured value that could be a secret.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

#: One step into a YAML document: a mapping key or a list index.
PathPart = str | int
DataPath = tuple[PathPart, ...]


def format_path(path: DataPath) -> str:
    """A YAML path as a person writes it: `channels[0].token`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One error in one configuration file."""

    file: Path
    line: int | None
    message: str
    suggestion: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else f"{self.file}"
        if not self.suggestion:
            return f"{where}: {self.message}"
        return f"{where}: {self.message}; {self.suggestion}"


class ConfigWarning(NamedTuple):
    """Something valid that is probably not what the author meant (the daemon logs it)."""

    file: Path | None
    line: int | None
    message: str

    def __str__(self) -> str:
        if self.file is None:
            return self.message
        if self.line is None:
            return f"{self.file}: {self.message}"
        return f"{self.file}:{self.line}: {self.message}"


class ConfigError(Exception):
    """The configuration cannot be used; `problems` lists every error found in every file."""

    def __init__(self, problems: Iterable[ConfigProblem]) -> None:
        self.problems: list[ConfigProblem] = list(problems)
        super().__init__(self._summary())

    def _summary(self) -> str:
        count = len(self.problems)
        heading = "1 problem" if count == 1 else f"{count} problems"
        lines = [f"{heading} in the configuration:"]
        lines.extend(f"  {problem}" for problem in self.problems)
        return "\n".join(lines)


class ConfigValueError(ValueError):
    """Raised by model validators to report a problem at a precise key, with advice.

    pydantic reports a model validator's error at the model itself; `at` is the path below
    the model (a field name, or a list index for a list validator) that the loader appends so
    the problem points at the offending line rather than the enclosing mapping.
    """

    def __init__(self, message: str, suggestion: str, at: DataPath = ()) -> None:
        super().__init__(message)
        self.message = message
        self.suggestion = suggestion
        self.at = at


@dataclass(frozen=True, slots=True)
class ModeRequires:
    """In `mode`, `key` must be set: the problem names both, and `why` says what the key is
    for; `fix` tells what to add (or which other mode needs no such key)."""

    mode: str
    key: str
    fix: str
    why: str = ""
    at: DataPath = ("mode",)

    def check(self, model: object) -> None:
        """Refuse `model` when it is in this mode without the key."""
        if getattr(model, "mode", None) == self.mode and getattr(model, self.key) is None:
            raise ConfigValueError(
                f"{self.mode} mode requires '{self.key}'{self.why}", self.fix, at=self.at
            )
