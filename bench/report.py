"""Benchmark figures: one measured value each, printed as a table and kept in a JSON file."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

#: The JSON file `python -m bench` keeps its figures in.
RESULTS_PATH = Path(__file__).with_name("results.json")

_HEADERS = ("suite", "figure", "value", "unit", "target", "ok")


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured value. A figure with a target says whether this run met it."""

    suite: str
    name: str
    value: float
    unit: str
    #: What the value must be, written for a reader ("<= 12"); a bare number is shown as is.
    target: str | float | None = None
    ok: bool | None = None

    @classmethod
    def at_most(
        cls, suite: str, name: str, value: float, unit: str, most: float, *, digits: int
    ) -> Figure:
        """A figure that must not exceed `most`, shown to `digits` decimals ("<= most")."""
        return cls(suite, name, round(value, digits), unit, target=f"<= {most:g}", ok=value <= most)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Figure:
        target = data.get("target")
        ok = data.get("ok")
        value = data["value"]
        if not isinstance(value, int | float):
            raise ValueError(f"figure value must be a number, got {value!r}")
        return cls(
            suite=str(data["suite"]),
            name=str(data["name"]),
            value=value,
            unit=str(data["unit"]),
            target=target if isinstance(target, str | int | float) else None,
            ok=ok if isinstance(ok, bool) else None,
        )


def _cells(figure: Figure) -> tuple[str, ...]:
    verdict = "" if figure.ok is None else ("ok" if figure.ok else "FAIL")
    target = "" if figure.target is None else str(figure.target)
    return (figure.suite, figure.name, f"{figure.value:g}", figure.unit, target, verdict)


def format_table(figures: Sequence[Figure], notes: Iterable[tuple[str, str]] = ()) -> str:
    """A plain-text table of the figures; `notes` adds (suite, remark) rows with no value."""
    rows = [_cells(figure) for figure in figures]
    rows += [(suite, remark, "", "", "", "") for suite, remark in notes]
    widths = [max(len(row[i]) for row in (_HEADERS, *rows)) for i in range(len(_HEADERS))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))

    separator = "  ".join("-" * width for width in widths)
    return "\n".join([line(_HEADERS), separator, *(line(row) for row in rows)]).rstrip()


def load_results(path: Path = RESULTS_PATH) -> list[Figure]:
    if not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    return [Figure.from_json(item) for item in data.get("figures", [])]


def merge_results(
    figures: Sequence[Figure], suites: Iterable[str], path: Path = RESULTS_PATH
) -> list[Figure]:
    """Replace the stored figures of `suites` with `figures`, keep the others, write the file.

    Running one suite updates only its own entries. Returns everything now stored.
    """
    replaced = set(suites)
    kept = [figure for figure in load_results(path) if figure.suite not in replaced]
    merged = kept + list(figures)
    document = {"figures": [asdict(figure) for figure in merged]}
    # Written aside and renamed, so an interrupted run never leaves half a file.
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(
        json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    os.replace(temporary, path)
    return merged
