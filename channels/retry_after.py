"""How long a "too many requests" answer asks to wait: the one reading of a `Retry-After`
value (a header, or a rate limit's field in a body) that every platform channel and the
agents' HTTP clients share."""

from __future__ import annotations

import math

#: What is waited out when a platform says "too many requests" without saying how long (QQ
#: never says; Slack's chat methods allow about one message a second per channel), then the
#: retry layer tries again.
DEFAULT_RETRY_AFTER_S = 1.0


def parse_retry_after(value: object) -> float | None:
    """Seconds from a `Retry-After` value given in seconds (text or a number); None when it is
    absent or not a finite, non-negative number (the HTTP-date form included)."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str | bytes):
        try:
            seconds = float(value)
        except ValueError:
            return None
    else:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def retry_after_s(value: object, default: float = DEFAULT_RETRY_AFTER_S) -> float:
    """`parse_retry_after(value)`, or `default` when it says nothing usable."""
    seconds = parse_retry_after(value)
    return default if seconds is None else seconds
