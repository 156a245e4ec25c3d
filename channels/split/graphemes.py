"""Grapheme cluster boundaries of a text, answered locally so a long text costs nothing extra.

Segmenting a whole reply with `regex`'s `\\X` costs more than the rest of the splitter together.
But a boundary can only be missing next to a code point that takes part in a joining rule of
Unicode's UAX #29: CR (before LF), Prepend, Extend (combining marks, emoji modifiers, variation
selectors, the virama of an Indic conjunct), ZWJ, SpacingMark, Regional_Indicator (flags) and
the Hangul jamo L, V and T. (A precomposed Hangul syllable only joins a jamo, which is in that
list.) Between two other code points there is always a boundary.

So a query looks at the two code points around the position; only when one of them can join does
it segment with `\\X`, from the nearest position where the rule above guarantees a boundary,
which is a true boundary to start from. The last segmentation is cached, and a segmentation that
meets it is appended to it, so a long run of joining code points is segmented once.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import regex

_CLUSTER = regex.compile(r"\X", regex.DOTALL)
_JOINING = regex.compile(
    r"[\r\p{GCB=Prepend}\p{GCB=Extend}\p{GCB=ZWJ}\p{GCB=SpacingMark}"
    r"\p{GCB=Regional_Indicator}\p{GCB=L}\p{GCB=V}\p{GCB=T}]"
)
#: No code point below U+0300 joins anything except CR, so most text needs no lookup at all.
_FIRST_JOINING_ABOVE_CR = 0x300
#: How far past the asked index a segmentation goes looking for a certain boundary.
_RUN_ON = 64
#: Code points segmented per `\X` pass (see `_segment_from`).
_SLICE = 128


class GraphemeIndex:
    """Answers "is this index a grapheme cluster boundary?" for one text."""

    __slots__ = ("_joining", "_length", "_segment", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._length = len(text)
        self._joining: dict[str, bool] = {}
        # Boundaries of the last segmented stretch, ascending; its first and last are boundaries.
        self._segment: list[int] = [0]

    def is_boundary(self, index: int, *, known: int = 0) -> bool:
        """Whether a cluster ends at `index`.

        `known` is any boundary at or before `index` (a chunk's start, say); segmentation never
        starts further back than it, which bounds the work on a long run of joining marks.
        """
        if index <= 0 or index >= self._length or self._surely_boundary(index):
            return True
        segment = self._segment_around(index, known)
        position = bisect_left(segment, index)
        return position < len(segment) and segment[position] == index

    def floor(self, index: int, *, known: int = 0) -> int:
        """The last boundary at or before `index`."""
        if self.is_boundary(index, known=known):
            return index
        segment = self._segment_around(index, known)
        return segment[bisect_right(segment, index) - 1]

    def ceil(self, index: int, *, known: int = 0) -> int:
        """The first boundary at or after `index`."""
        if self.is_boundary(index, known=known):
            return index
        segment = self._segment_around(index, known)
        return segment[bisect_left(segment, index)]

    def _joins(self, char: str) -> bool:
        if ord(char) < _FIRST_JOINING_ABOVE_CR:
            return char == "\r"
        joins = self._joining.get(char)
        if joins is None:
            joins = self._joining[char] = _JOINING.match(char) is not None
        return joins

    def _surely_boundary(self, index: int) -> bool:
        text = self._text
        return not self._joins(text[index - 1]) and not self._joins(text[index])

    def _segment_around(self, index: int, known: int) -> list[int]:
        """Boundaries of a stretch containing `index`, from the cache or freshly segmented."""
        segment = self._segment
        if segment[0] <= index <= segment[-1]:
            return segment
        floor = known if 0 <= known <= index else 0
        if segment[-1] <= index:
            floor = max(floor, segment[-1])
        anchor = index - 1
        while anchor > floor and not self._surely_boundary(anchor):
            anchor -= 1
        fresh = self._segment_from(anchor, index)
        if anchor == segment[-1]:
            segment.extend(fresh[1:])
        else:
            self._segment = segment = fresh
        return segment

    def _segment_from(self, anchor: int, index: int) -> list[int]:
        """Boundaries from the true boundary `anchor` to a little past `index`.

        `\\X` runs on short slices, each starting at a true boundary: `regex` looks back over
        a whole run of regional indicators to count their parity (from its start position back
        to the start of the string), which made a long run of flags quadratic. The last cluster
        of a slice may be cut short by the slice's end, so it is segmented again with the next.
        """
        bounds = [anchor]
        position = anchor
        size = _SLICE
        while position < self._length:
            stop = min(self._length, position + size)
            ends = [
                position + match.end() for match in _CLUSTER.finditer(self._text[position:stop])
            ]
            if stop < self._length:
                ends.pop()
                if not ends:
                    size *= 2  # one cluster longer than the slice
                    continue
            for end in ends:
                bounds.append(end)
                # Run on a little, to a certain boundary if one is near, so that neighbouring
                # queries hit the cache; every end of a cluster is a true boundary to stop at.
                if end >= index and (
                    end >= self._length or end - index >= _RUN_ON or self._surely_boundary(end)
                ):
                    return bounds
            position = bounds[-1]
            size = _SLICE
        return bounds
