"""Every log event is named in one style, `area.what_happened` (`telegram.connected`).

Prose belongs in a field (`detail=...`), so a log search or an alert can match the name
exactly. The check reads the source: each `log.<level>("...")` call with a literal name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bus", "channels", "config", "gateway", "sessions", "bench")
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}
EVENT_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)+")


def _logged_names(path: Path) -> list[tuple[int, str]]:
    names: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver = node.func.value
        if node.func.attr not in LEVELS or not (
            isinstance(receiver, ast.Name) and receiver.id == "log"
        ):
            continue
        first = node.args[0] if node.args else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            names.append((node.lineno, first.value))
    return names


def test_log_event_names_are_dotted_identifiers() -> None:
    checked = 0
    wrong: list[str] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, name in _logged_names(path):
                checked += 1
                if not EVENT_NAME.fullmatch(name):
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: {name!r}")
    assert checked > 200  # the walk found the project's log calls
    assert wrong == [], "name log events `area.what_happened`:\n" + "\n".join(wrong)
