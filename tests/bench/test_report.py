"""The benchmark report: the table and the merged results file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.report import Figure, format_table, load_results, merge_results


def test_merging_replaces_only_the_suites_that_ran(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    merge_results([Figure("a", "x", 1.0, "ms"), Figure("b", "y", 2.0, "ms")], ["a", "b"], path)
    merged = merge_results([Figure("a", "x", 3.0, "ms", target="<= 5", ok=True)], ["a"], path)
    assert merged == load_results(path)
    assert {(f.suite, f.value) for f in merged} == {("a", 3.0), ("b", 2.0)}
    assert not path.with_name("results.json.tmp").exists()
    assert json.loads(path.read_text())["figures"][1]["target"] == "<= 5"


def test_table_marks_failed_targets_and_notes() -> None:
    table = format_table(
        [Figure("s", "fast", 2.5, "ms", target="<= 1", ok=False)], [("t", "not built")]
    )
    header, _rule, failed, note = table.splitlines()
    assert header.split() == ["suite", "figure", "value", "unit", "target", "ok"]
    assert failed.split() == ["s", "fast", "2.5", "ms", "<=", "1", "FAIL"]
    assert note.split() == ["t", "not", "built"]


def test_unknown_suite_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["nonsense"])
    assert exit_info.value.code == 2
    assert "unknown suite nonsense" in capsys.readouterr().err
