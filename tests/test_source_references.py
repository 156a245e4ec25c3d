"""A module's docstrings and comments point a reader at modules that exist.

A comment that says "see `receiver.py`" is how a reader finds the next piece; when the module
it names is folded away or renamed, the pointer leads nowhere. Every `name.py` in backticks in
the source packages must name a file there: by its path from the repository's root, or by its
name alone when it is a module of the same folder or, failing that, of any source package.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE_PACKAGES = ("bus", "config", "sessions", "channels", "gateway", "bench")
MODULE_REFERENCE = re.compile(r"`([\w/]+\.py)`")


def _source_files() -> list[Path]:
    return sorted(path for package in SOURCE_PACKAGES for path in (ROOT / package).rglob("*.py"))


def _references() -> list[tuple[Path, int, str]]:
    found: list[tuple[Path, int, str]] = []
    for path in _source_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found.extend((path, number, name) for name in MODULE_REFERENCE.findall(line))
    return found


_MODULE_NAMES = {path.name for path in _source_files()}


def test_the_source_points_at_modules() -> None:
    assert len(_references()) > 20


@pytest.mark.parametrize(
    ("path", "line", "name"),
    _references(),
    ids=lambda value: str(value.relative_to(ROOT)) if isinstance(value, Path) else str(value),
)
def test_each_named_module_exists(path: Path, line: int, name: str) -> None:
    where = f"{path.relative_to(ROOT)}:{line} names `{name}`"
    if "/" in name:
        assert (ROOT / name).is_file(), f"{where}, which is not a file of the repository"
    else:
        assert (path.parent / name).is_file() or name in _MODULE_NAMES, (
            f"{where}, which is no module of the source packages: name the module that holds it now"
        )
