"""docs/channels.md stays true: every module, file and name it points a newcomer at exists.

The guide is how the next channels are written, so a rename that leaves it pointing at nothing
fails here rather than in the hands of whoever follows it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "channels.md"
PACKAGES = ("bus", "channels", "config", "gateway", "sessions", "tests")
#: A reference in backticks: a dotted name or a path in one of the project's packages, with
#: what follows it (a call's arguments) left out.
REFERENCE = re.compile(r"`((?:" + "|".join(PACKAGES) + r")[./][\w./:]*)[^`]*`")


def references() -> list[str]:
    found = {match.group(1) for match in REFERENCE.finditer(GUIDE.read_text(encoding="utf-8"))}
    # A placeholder path (`channels/<platform>/`) stops before its `<`: nothing left to check.
    return sorted({ref.rstrip("./") for ref in found if not ref.endswith("_")})


def resolves(dotted: str) -> bool:
    """Whether `a.b.c` is a module, or a module's attribute (chain)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def test_the_guide_points_at_things() -> None:
    assert len(references()) > 50


@pytest.mark.parametrize("reference", references())
def test_each_reference_exists(reference: str) -> None:
    if "/" not in reference:
        assert resolves(reference), f"docs/channels.md names {reference}, which does not exist"
        return
    path, _, name = reference.partition("::")
    assert (ROOT / path).exists(), f"docs/channels.md names {path}, which does not exist"
    if name:
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8")
