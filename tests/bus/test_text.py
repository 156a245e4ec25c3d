"""Byte-budget truncation: never a broken character, at every budget."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bus import (
    DEFAULT_TOOL_OUTPUT_LIMIT,
    TOOL_OUTPUT_LIMITS,
    tool_output_limit,
    truncate_head_tail,
    truncate_utf8,
    truncated_utf8,
    utf8_len,
)

# ASCII, accented Latin (2 bytes), CJK (3 bytes) and emoji (4 bytes), mixed.
MIXED = st.text(
    alphabet=st.sampled_from(
        ["a", "b", " ", "\n", "é", "ß", "你", "好", "世", "界", "😀", "👍", "🇯"]
    ),
    max_size=60,
)
ANY_TEXT = st.text(max_size=60)
BUDGETS = st.integers(min_value=0, max_value=250)
SUFFIXES = st.sampled_from(["", "…", "...", " [cut]", "✂️"])

HEAD_TAIL = re.compile(
    r"\A(?P<head>.*)\n\n\.\.\. \[(?P<omitted>\d+) bytes omitted\] \.\.\.\n\n(?P<tail>.*)\Z", re.S
)


def test_the_seed_example() -> None:
    text = "你好世界"
    assert utf8_len(text) == 12
    assert truncated_utf8(text, 7) == "你好"
    assert truncated_utf8(text, 7, "...") == "你好..."
    assert truncated_utf8(text, 12, "...") == text
    assert truncate_utf8(text, 7) == "你好"
    assert truncate_utf8(text, 7, "…") == "你…"  # "…" takes 3 of the 7 bytes
    assert truncate_utf8(text, 5, "…") == "…"


def test_the_two_budgets_differ_only_in_counting_the_suffix() -> None:
    text = "hello world"
    assert truncated_utf8(text, 5, "...") == "hello..."
    assert truncate_utf8(text, 5, "...") == "he..."
    assert truncate_utf8(text, 2, "...") == ".."
    assert truncate_utf8(text, 0, "...") == ""


def test_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        truncate_utf8("x", -1)
    with pytest.raises(ValueError, match="negative"):
        truncate_head_tail("x", -1)


def test_lone_surrogates_pass_through() -> None:
    text = "ab\udcff" * 5
    cut = truncated_utf8(text, 7)
    assert cut == "ab\udcffab"
    assert truncate_head_tail(text, 10).startswith("ab\udcff\n")


@given(text=MIXED | ANY_TEXT, budget=BUDGETS, suffix=SUFFIXES)
def test_truncated_utf8_keeps_a_prefix_within_budget(text: str, budget: int, suffix: str) -> None:
    result = truncated_utf8(text, budget, suffix)
    if utf8_len(text) <= budget:
        assert result == text
        return
    assert result.endswith(suffix)
    kept = result[: len(result) - len(suffix)]
    assert text.startswith(kept)
    assert utf8_len(kept) <= budget
    # The cut is as late as possible: one more character would pass the budget.
    assert utf8_len(text[: len(kept) + 1]) > budget


@given(text=MIXED | ANY_TEXT, budget=BUDGETS, suffix=SUFFIXES)
def test_truncate_utf8_fits_the_whole_budget(text: str, budget: int, suffix: str) -> None:
    result = truncate_utf8(text, budget, suffix)
    assert utf8_len(result) <= budget
    if utf8_len(text) <= budget:
        assert result == text
    elif utf8_len(suffix) < budget:
        assert result.endswith(suffix)
        kept = result[: len(result) - len(suffix)]
        assert text.startswith(kept)
        assert utf8_len(text[: len(kept) + 1]) + utf8_len(suffix) > budget
    else:
        assert suffix.startswith(result)


@given(text=MIXED, budget=BUDGETS, ratio=st.floats(min_value=-1, max_value=2) | st.just(0.5))
def test_head_tail_keeps_both_ends(text: str, budget: int, ratio: float) -> None:
    result = truncate_head_tail(text, budget, ratio)
    total = utf8_len(text)
    if total <= budget:
        assert result == text
        return
    match = HEAD_TAIL.match(result)
    assert match is not None
    head, tail = match["head"], match["tail"]
    assert text.startswith(head)
    assert text.endswith(tail)
    assert utf8_len(head) + utf8_len(tail) <= budget
    assert int(match["omitted"]) == total - utf8_len(head) - utf8_len(tail)
    clamped = min(0.9, max(0.1, ratio))
    assert utf8_len(head) <= int(budget * clamped)
    assert utf8_len(tail) <= budget - int(budget * clamped)


def test_head_tail_example() -> None:
    text = "A" * 50 + "中" * 50 + "Z" * 50  # 50 + 150 + 50 bytes
    result = truncate_head_tail(text, 100, head_ratio=0.5)
    assert result == "A" * 50 + "\n\n... [150 bytes omitted] ...\n\n" + "Z" * 50
    weighted = truncate_head_tail(text, 100, head_ratio=0.8)
    assert weighted.startswith("A" * 50 + "中" * 10 + "\n\n... [")
    assert weighted.endswith("\n\n" + "Z" * 20)


def test_head_tail_clamps_the_ratio() -> None:
    text = "x" * 1000
    assert truncate_head_tail(text, 100, head_ratio=0.0).startswith("x" * 10 + "\n")
    assert truncate_head_tail(text, 100, head_ratio=1.0).endswith("\n" + "x" * 10)
    assert truncate_head_tail(text, 100, head_ratio=float("nan")).startswith("x" * 50 + "\n")


@pytest.mark.parametrize(
    ("tool", "limit"),
    [
        ("read_file", 50_000),
        ("shell", 30_000),
        ("grep", 30_000),
        ("web_fetch", 40_000),
        ("web_search", 20_000),
        ("deep_search", 50_000),
        ("deep_research", 50_000),
        ("spawn", 50_000),
        ("something_else", 50_000),
    ],
)
def test_tool_output_limits(tool: str, limit: int) -> None:
    assert tool_output_limit(tool) == limit
    assert DEFAULT_TOOL_OUTPUT_LIMIT == 50_000


def test_the_limits_table_is_what_tool_output_limit_reads_and_cannot_be_changed() -> None:
    assert all(tool_output_limit(tool) == limit for tool, limit in TOOL_OUTPUT_LIMITS.items())
    assert "something_else" not in TOOL_OUTPUT_LIMITS
    with pytest.raises(TypeError):
        TOOL_OUTPUT_LIMITS["shell"] = 1  # type: ignore[index]
