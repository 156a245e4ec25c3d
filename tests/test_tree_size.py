"""The source tree stays one a newcomer can read: few enough modules, and few side by side.

A concept gets a module of its own; a helper of a few lines lives in the module of the concept
it serves. The bounds are issue 31's: at most 250 modules in the source packages, at most 20
modules side by side in one folder.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bus", "config", "sessions", "channels", "gateway")
MAX_MODULES = 250
MAX_SIDE_BY_SIDE = 20


def test_the_source_packages_hold_at_most_250_modules() -> None:
    modules = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    assert len(modules) <= MAX_MODULES, (
        f"{len(modules)} modules: fold a small one into the module of the concept it serves"
    )


def test_no_folder_holds_more_than_20_modules_side_by_side() -> None:
    crowded = {}
    for package in PACKAGES:
        for folder in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]:
            if folder.name == "__pycache__" or not (folder / "__init__.py").exists():
                continue
            entries = [
                entry
                for entry in folder.iterdir()
                if entry.suffix == ".py" and entry.name != "__init__.py"
            ]
            if len(entries) > MAX_SIDE_BY_SIDE:
                crowded[str(folder.relative_to(ROOT))] = len(entries)
    assert crowded == {}
