"""Byte-budget text utilities that never cut a character in half.

LLM context budgets, log lines and some platforms count UTF-8 bytes, not characters: Chinese
takes 3 bytes a character, most emoji 4. Python's `s[:n]` counts code points, so cutting to a
byte budget needs these helpers. Lone surrogates (as `os.fsdecode` or `surrogateescape` produce)
are carried through instead of raising.

Octos has an in-place `truncate_utf8(&mut String, ...)` and a copying `truncated_utf8(&str, ...)`
with identical rules. Python strings are immutable, so both return a new string here and the
two names mean two different budgets:

- `truncated_utf8` is the seed's rule: `max_bytes` bounds the kept content and the suffix is
  extra, so the result can be up to `len(suffix)` bytes longer than `max_bytes`;
- `truncate_utf8` is a hard budget for the whole result: the suffix is counted, so the result
  always fits in `max_bytes` (what a platform limit or a log field needs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

_ENCODING = "utf-8"
_ERRORS = "surrogatepass"

DEFAULT_TOOL_OUTPUT_LIMIT = 50_000

#: Characters of a tool's output an agent keeps, by tool (octos' table).
TOOL_OUTPUT_LIMITS: Mapping[str, int] = MappingProxyType(
    {
        "read_file": 50_000,
        "shell": 30_000,
        "grep": 30_000,
        "web_fetch": 40_000,
        "web_search": 20_000,
        "deep_search": 50_000,
        "deep_research": 50_000,
        "spawn": 50_000,
    }
)


def utf8_len(s: str) -> int:
    """The number of bytes `s` takes in UTF-8."""
    return len(s.encode(_ENCODING, _ERRORS))


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _check_budget(max_bytes: int) -> None:
    if max_bytes < 0:
        raise ValueError(f"byte budget must not be negative, got {max_bytes}")


def _fits(s: str, max_bytes: int) -> bool:
    # Every code point takes at least one byte, so a string longer in code points than the
    # budget cannot fit, and a short one is cheap to encode.
    return len(s) <= max_bytes and utf8_len(s) <= max_bytes


def _prefix_within(s: str, max_bytes: int) -> str:
    """The longest prefix of `s` that takes at most `max_bytes` bytes."""
    if max_bytes <= 0:
        return ""
    # The kept prefix lies within the first `max_bytes` code points: only those are encoded.
    window = s[:max_bytes]
    data = window.encode(_ENCODING, _ERRORS)
    if len(data) <= max_bytes:
        return window
    cut = max_bytes
    while cut > 0 and _is_continuation(data[cut]):
        cut -= 1
    return data[:cut].decode(_ENCODING, _ERRORS)


def truncated_utf8(s: str, max_bytes: int, suffix: str = "") -> str:
    """`s` cut to at most `max_bytes` bytes of content, then `suffix` appended (the seed's rule).

    Returns `s` unchanged when it fits. The suffix is not counted: leave room for it in
    `max_bytes` when the total matters, or use `truncate_utf8`.
    """
    _check_budget(max_bytes)
    if _fits(s, max_bytes):
        return s
    return _prefix_within(s, max_bytes) + suffix


def truncate_utf8(s: str, max_bytes: int, suffix: str = "") -> str:
    """`s` cut so that the whole result, `suffix` included, takes at most `max_bytes` bytes.

    Returns `s` unchanged when it fits. When even the suffix does not fit, the result is the
    suffix itself cut to the budget.
    """
    _check_budget(max_bytes)
    if _fits(s, max_bytes):
        return s
    suffix_bytes = utf8_len(suffix)
    if suffix_bytes >= max_bytes:
        return _prefix_within(suffix, max_bytes)
    return _prefix_within(s, max_bytes - suffix_bytes) + suffix


def _clamp_ratio(head_ratio: float) -> float:
    if math.isnan(head_ratio):
        return 0.5
    return min(0.9, max(0.1, head_ratio))


def truncate_head_tail(s: str, max_bytes: int, head_ratio: float = 0.5) -> str:
    """Keep the start and the end of `s`, about `max_bytes` bytes of content in all.

    `head_ratio` (clamped to [0.1, 0.9]) of the budget goes to the head, the rest to the tail;
    both cuts fall on character boundaries, so each side keeps at most its share. The parts are
    joined by ``"\\n\\n... [N bytes omitted] ...\\n\\n"``, which, as in octos, is not counted in
    `max_bytes`. Useful for tool output and error bodies, whose ends often hold the conclusion.
    """
    _check_budget(max_bytes)
    if _fits(s, max_bytes):
        return s
    data = s.encode(_ENCODING, _ERRORS)
    head_budget = int(max_bytes * _clamp_ratio(head_ratio))
    tail_budget = max_bytes - head_budget

    head_end = head_budget
    while head_end > 0 and _is_continuation(data[head_end]):
        head_end -= 1
    tail_start = len(data) - tail_budget
    while tail_start < len(data) and _is_continuation(data[tail_start]):
        tail_start += 1

    omitted = tail_start - head_end
    head = data[:head_end].decode(_ENCODING, _ERRORS)
    tail = data[tail_start:].decode(_ENCODING, _ERRORS)
    return f"{head}\n\n... [{omitted} bytes omitted] ...\n\n{tail}"


def tool_output_limit(tool_name: str) -> int:
    """How many characters of `tool_name`'s output to keep (50,000 for unknown tools)."""
    return TOOL_OUTPUT_LIMITS.get(tool_name, DEFAULT_TOOL_OUTPUT_LIMIT)


def scrub_surrogates(text: str) -> str:
    """`text` with lone surrogates (which no UTF-8 file or JSON encoder takes) as U+FFFD."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text
