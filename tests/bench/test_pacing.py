"""`python -m bench pacing` runs end to end, at sizes a test can afford."""

from __future__ import annotations

import pytest

from bench.pacing import SUITE, Sizes, figures

pytestmark = pytest.mark.slow


def test_the_pacing_bench_reports_each_scenario_paced_and_unpaced() -> None:
    tiny = Sizes(replies=8, reply_chats=4, streams=2, snapshots=2, groups=2, give_up_s=30)
    reported = {figure.name: figure for figure in figures(tiny)}
    assert {figure.suite for figure in reported.values()} == {SUITE}
    for scenario in ("a: ", "b: ", "c: "):
        [paced_429s] = [
            f for n, f in reported.items() if n.startswith(scenario) and n.endswith("429s, paced")
        ]
        assert (paced_429s.value, paced_429s.ok) == (0, True)
        [finals] = [
            f
            for n, f in reported.items()
            if n.startswith(scenario) and n.endswith("delivered, paced")
        ]
        assert finals.ok, finals
    assert any(name.endswith("edits sent, pacing off") for name in reported)
