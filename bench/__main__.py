"""Run benchmark suites: `python -m bench [suite ...]` (default: all of them, in order).

Prints one table and merges the figures into `bench/results.json`: a suite that ran replaces
its own entries, the others are kept. A suite whose module is not written yet is reported as
"not built". Exits with status 1 when a figure misses its target.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.report import RESULTS_PATH, Figure, format_table, merge_results

#: Every suite, in the order they run: `bench/<name>.py` exposing `run() -> list[Figure]`.
SUITES = ("splitter", "bus", "sessions", "gateway", "lease", "cluster", "pacing")


def _load(suite: str) -> Callable[[], list[Figure]] | None:
    """The suite's `run`, or None when its module does not exist yet."""
    module_name = f"bench.{suite}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name == module_name:
            return None
        raise  # the suite exists but something it imports is missing: say so
    run: Callable[[], list[Figure]] = module.run
    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("suites", nargs="*", metavar="suite", help=f"any of: {', '.join(SUITES)}")
    parser.add_argument(
        "--output", type=Path, default=RESULTS_PATH, help="JSON file to merge the figures into"
    )
    args = parser.parse_args(argv)
    requested: list[str] = args.suites or list(SUITES)
    unknown = sorted(set(requested) - set(SUITES))
    if unknown:
        parser.error(f"unknown suite {', '.join(unknown)}; choose from {', '.join(SUITES)}")
    selected = [suite for suite in SUITES if suite in requested]

    figures: list[Figure] = []
    notes: list[tuple[str, str]] = []
    ran: list[str] = []
    for suite in selected:
        run = _load(suite)
        if run is None:
            notes.append((suite, "not built"))
            continue
        print(f"running {suite} ...", file=sys.stderr, flush=True)
        figures.extend(run())
        ran.append(suite)

    print(format_table(figures, notes))
    if ran:
        merge_results(figures, ran, args.output)
    return 1 if any(figure.ok is False for figure in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
