"""Where a Markdown text's fenced code blocks are, found by scanning for fence markers only.

The rules are CommonMark's, loosened where a chat reply needs it: a fence line is a run of at
least three backticks or tildes at the start of a line after any indentation (an agent indents
code inside list items freely), then an info string, which for backticks contains no backtick.
It is closed by a line of the same character, at least as long, with only blanks after it; a
fence never closed runs to the end of the text, as in CommonMark. Only the fence lines are
looked at, so the scan costs two passes of `re` over the text plus a little per fence line.
"""

from __future__ import annotations

import heapq
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_MARKER_PATTERNS = (re.compile("```"), re.compile("~~~"))
_BLANKS = " \t"
_LINE_TRAILING_BLANKS = " \t\r"


@dataclass(frozen=True, slots=True)
class Fence:
    """One fenced code block, as indices into the text."""

    open_start: int  #: start of the opener line, its indentation included
    body_start: int  #: just after the opener line's newline
    close_start: int  #: start of the closer line; the text's length when never closed
    close_end: int  #: end of the closer line, before its newline; the length when never closed
    closed: bool
    opener: str  #: the opener line as written: indentation, marker, info string
    closer: str  #: the line that closes it when the splitter must: indentation and marker
    content_start: int  #: first non-whitespace character of the body (close_start if blank)
    content_end: int  #: just after the last non-whitespace character (body_start if blank)


def find_fences(text: str) -> list[Fence]:
    """Every fenced code block of `text`, in order."""
    return list(iter_fences(text))


def iter_fences(text: str) -> Iterator[Fence]:
    """The fenced code blocks of `text` in order, each found when the scan reaches its closer."""
    opened: _Opener | None = None
    for line_start, marker_start, marker_end, line_end in _fence_lines(text):
        marker = text[marker_start:marker_end]
        rest = text[marker_end:line_end]
        if opened is None:
            if marker[0] == "`" and "`" in rest:
                continue  # an inline code span, not a fence
            opened = _Opener(line_start, line_end, marker, text[line_start:marker_start])
        elif (
            marker[0] == opened.marker[0]
            and len(marker) >= len(opened.marker)
            and not rest.strip(_LINE_TRAILING_BLANKS)
        ):
            yield opened.fence(text, line_start, line_end, closed=True)
            opened = None
    if opened is not None:
        yield opened.fence(text, len(text), len(text), closed=False)


@dataclass(frozen=True, slots=True)
class _Opener:
    line_start: int
    line_end: int
    marker: str
    indent: str

    def fence(self, text: str, close_start: int, close_end: int, *, closed: bool) -> Fence:
        body_start = min(self.line_end + 1, len(text))
        # Walk over the blanks at both ends rather than strip a copy of the whole body.
        content_start = body_start
        while content_start < close_start and text[content_start].isspace():
            content_start += 1
        content_end = close_start
        while content_end > content_start and text[content_end - 1].isspace():
            content_end -= 1
        if content_start == close_start:
            content_end = body_start
        return Fence(
            open_start=self.line_start,
            body_start=body_start,
            close_start=close_start,
            close_end=close_end,
            closed=closed,
            opener=text[self.line_start : self.line_end].rstrip("\r"),
            closer=self.indent + self.marker,
            content_start=content_start,
            content_end=content_end,
        )


def _fence_lines(text: str) -> Iterator[tuple[int, int, int, int]]:
    """(line start, marker start, marker end, line end) of each line that looks like a fence."""
    length = len(text)
    position = 0
    # `re` finds every literal in one pass, much faster than repeated `str.find` calls.
    runs = heapq.merge(*(pattern.finditer(text) for pattern in _MARKER_PATTERNS), key=_start)
    for run in runs:
        marker_start = run.start()
        if marker_start < position:
            continue
        fence_char = text[marker_start]
        marker_end = marker_start + 3
        while marker_end < length and text[marker_end] == fence_char:
            marker_end += 1
        position = marker_end
        indent_start = marker_start
        while indent_start > 0 and text[indent_start - 1] in _BLANKS:
            indent_start -= 1
        if indent_start > 0 and text[indent_start - 1] != "\n":
            continue  # the run is inside a line of prose
        line_end = text.find("\n", marker_end)
        line_end = length if line_end < 0 else line_end
        position = line_end
        yield indent_start, marker_start, marker_end, line_end


def _start(match: re.Match[str]) -> int:
    return match.start()


class FenceMap:
    """Fences looked up by position: which block's body or protected zone holds an index.

    A cut strictly inside a fence's zone (after the start of its opener line, before the end of
    its closer line) would leave an opener without its closer; a fence never closed holds the
    end of the text in its zone as well.

    The text is scanned only as far as the lookups reach, so a splitter walking forward reads
    each stretch of text while it is still in the processor's cache, and one that stops at its
    chunk cap never scans the rest. `keep` drops fences the caller wants treated as plain text.
    """

    __slots__ = ("_fences", "_keep", "_length", "_pending", "_starts", "_upcoming")

    def __init__(self, text: str, keep: Callable[[Fence], bool] = lambda fence: True) -> None:
        self._fences: list[Fence] = []
        self._starts: list[int] = []
        self._length = len(text)
        self._keep = keep
        self._pending = iter_fences(text)
        self._upcoming = next(self._pending, None)

    def _scan_before(self, index: int) -> None:
        """Take in every fence whose opener line starts before `index`."""
        while self._upcoming is not None and self._upcoming.open_start < index:
            if self._keep(self._upcoming):
                self._fences.append(self._upcoming)
                self._starts.append(self._upcoming.open_start)
            self._upcoming = next(self._pending, None)

    def zone_at(self, index: int) -> Fence | None:
        """The fence whose zone holds `index`, if any."""
        self._scan_before(index)
        position = bisect_left(self._starts, index) - 1
        if position < 0:
            return None
        fence = self._fences[position]
        return fence if index < self._zone_end(fence) else None

    def body_at(self, index: int) -> Fence | None:
        """The fence whose body holds `index` (a chunk starting there reopens it), if any."""
        self._scan_before(index + 1)
        position = bisect_right(self._starts, index) - 1
        if position < 0:
            return None
        fence = self._fences[position]
        inside = fence.body_start <= index and (index < fence.close_start or not fence.closed)
        return fence if inside else None

    def gaps(self, low: int, high: int) -> list[tuple[int, int]]:
        """The stretches of `[low, high]` outside every zone, rightmost first, inclusive."""
        self._scan_before(high)
        stretches: list[tuple[int, int]] = []
        position = bisect_left(self._starts, high) - 1
        while position >= 0 and high >= low:
            fence = self._fences[position]
            zone_end = self._zone_end(fence)
            if zone_end <= low:
                break
            if zone_end <= high:
                stretches.append((zone_end, high))
            high = min(high, fence.open_start)
            position -= 1
        if high >= low:
            stretches.append((low, high))
        return stretches

    def _zone_end(self, fence: Fence) -> int:
        """The first index after the zone (one past the text's end for an unclosed fence)."""
        return fence.close_end if fence.closed else self._length + 1
