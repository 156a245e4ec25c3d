"""The guides stay true: every module, file and name docs/channels.md and docs/architecture.md
point a newcomer at exists.

The channel guide is how the next channels are written and the architecture page is where a
newcomer starts reading, so a rename that leaves either pointing at nothing fails here rather
than in the hands of whoever follows it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDES = ("channels.md", "architecture.md")
PACKAGES = ("bus", "channels", "cluster", "config", "gateway", "sessions", "tests")
#: A reference in backticks: a dotted name or a path in one of the project's packages, with
#: what follows it (a call's arguments) left out.
REFERENCE = re.compile(r"`((?:" + "|".join(PACKAGES) + r")[./][\w./:]*)[^`]*`")


def references(guide: str = "channels.md") -> list[str]:
    text = (ROOT / "docs" / guide).read_text(encoding="utf-8")
    found = {match.group(1) for match in REFERENCE.finditer(text)}
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


def test_the_guides_point_at_things() -> None:
    assert len(references("channels.md")) > 50
    assert len(references("architecture.md")) > 20


@pytest.mark.parametrize(
    ("guide", "reference"), [(guide, ref) for guide in GUIDES for ref in references(guide)]
)
def test_each_reference_exists(guide: str, reference: str) -> None:
    if "/" not in reference:
        assert resolves(reference), f"docs/{guide} names {reference}, which does not exist"
        return
    path, _, name = reference.partition("::")
    assert (ROOT / path).exists(), f"docs/{guide} names {path}, which does not exist"
    if name:
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8")
