"""TokenUsage: five counters, zero ones left out of JSON."""

from __future__ import annotations

import json

from bus import TokenUsage


def test_zero_usage_serialises_to_an_empty_object() -> None:
    assert TokenUsage().to_json() == "{}"


def test_zero_fields_are_left_out() -> None:
    usage = TokenUsage(input_tokens=10, reasoning_tokens=3)
    assert json.loads(usage.to_json()) == {"input_tokens": 10, "reasoning_tokens": 3}


def test_round_trip_and_missing_fields() -> None:
    usage = TokenUsage(
        input_tokens=1,
        output_tokens=2,
        reasoning_tokens=3,
        cache_read_tokens=4,
        cache_write_tokens=5,
    )
    assert TokenUsage.from_json(usage.to_json()) == usage
    assert TokenUsage.from_json('{"output_tokens": 7}') == TokenUsage(output_tokens=7)


def test_sum_and_total() -> None:
    first = TokenUsage(input_tokens=1, output_tokens=2, cache_read_tokens=5)
    second = TokenUsage(input_tokens=10, output_tokens=20, cache_write_tokens=1)
    both = first + second
    assert both == TokenUsage(
        input_tokens=11, output_tokens=22, cache_read_tokens=5, cache_write_tokens=1
    )
    assert both.total == 33
