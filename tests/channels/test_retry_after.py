"""The one reading of a `Retry-After` value, shared by the platform channels and the agents."""

from __future__ import annotations

import pytest

from channels.retry import DEFAULT_RETRY_AFTER_S, parse_retry_after, retry_after_s


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3", 3.0),
        ("0.5", 0.5),
        ("0", 0.0),
        (b"2", 2.0),
        (7, 7.0),
        (1.5, 1.5),
        (None, None),
        ("", None),
        ("-1", None),
        (-1, None),
        ("nan", None),
        ("inf", None),
        (True, None),
        ({"seconds": 3}, None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),
    ],
)
def test_parse_retry_after(value: object, seconds: float | None) -> None:
    assert parse_retry_after(value) == seconds


def test_a_value_that_says_nothing_usable_waits_the_default() -> None:
    assert retry_after_s("12") == 12.0
    assert retry_after_s(None) == DEFAULT_RETRY_AFTER_S
    assert retry_after_s("soon") == DEFAULT_RETRY_AFTER_S
    assert retry_after_s("-5", default=4.0) == 4.0
