"""The coalescing splitter: a long reply becomes messages that each fit the platform's limit.

Octos' five break levels, tried in order, each searched from the right: a paragraph break (a
blank line), a line break, the end of a sentence (`.`, `!` or `?` before a space or tab, or CJK
`。！？` with nothing after it), a space or tab, and last a hard cut. A chunk is filled before it
is cut: the levels are searched only in the last quarter of the room (`BREAK_WINDOW`), so a
paragraph break near the start of a long stretch never leaves a chunk a fraction full. Without
any break there, the cut falls at the last break before it, keeping a run that has none (a long
URL, a word of CJK without punctuation) whole when it fits the next chunk, else a hard cut.
Past `max_chunks` chunks the rest is replaced by one notice chunk, `[message truncated - N
characters omitted]`, N counting the code points not sent.

`split_rendered` fills chunks by what the platform receives: the channel's rendering of each
chunk (HTML, an event's JSON) is measured, and the room for the raw text searched so that the
rendering is as close under the limit as the break allows.

Where we go further than octos:

- The limit is counted in the platform's own unit (`PlatformLimit`: UTF-16 units, code points
  or UTF-8 bytes), and no cut falls inside a grapheme cluster (an emoji ZWJ sequence, a flag,
  a skin tone, a letter with its combining marks), not merely inside a code point.
- Markdown fences: a cut inside a fenced code block is avoided when a break outside fences is
  in the window, or when the block would fit one chunk whole (the cut then falls before it);
  when a block must be split, the chunk closes it and the next reopens it with the same opener
  line (info string included), and both fence lines count toward the limit. No cut ever falls
  inside a fence line.
- Linear time: the text is never re-sliced as "the rest"; every step works on indices into it,
  measures only the stretch it looks at and finds breaks with `str.rfind`.

Whitespace at chunk edges is dropped (a chunk starting a new line keeps its indentation), so no
chunk is empty or blank; an input of only whitespace gives no chunks. An input that fits is
returned unchanged.

Degenerate limits, the only exceptions to the rules above:

- A grapheme cluster wider than the whole limit (a 7-code-point family emoji against a limit
  of 4 UTF-16 units) is cut between its code points: no other choice keeps every chunk within
  the limit. A single code point wider than the limit (under 4 bytes or 2 UTF-16 units) is sent
  alone, over the limit, rather than dropped.
- A fence is closed and reopened only when its two fence lines together take at most half the
  limit; a fence with a longer opener line (or a limit too small for it) is split like plain text.
- The truncation notice is sent whole even when the limit is shorter than the notice itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from channels.split.fences import Fence, FenceMap
from channels.split.graphemes import GraphemeIndex
from channels.split.limits import PLATFORM_LIMITS, PlatformLimit

__all__ = [
    "BREAK_WINDOW",
    "MAX_CHUNKS",
    "PLATFORM_LIMITS",
    "PlatformLimit",
    "split_message",
    "split_rendered",
    "truncation_notice",
]

#: How many chunks one reply may become before the rest is replaced by a notice (octos: 50).
MAX_CHUNKS = 50

_NON_SPACE = re.compile(r"\S")
_FENCE_STARTS = ("```", "~~~")
_SENTENCE_ENDS = (". ", "! ", "? ", ".\t", "!\t", "?\t")
_CJK_SENTENCE_ENDS = ("。", "！", "？")
#: How far a hard cut steps back to avoid leaving a chunk that starts like a fence line.
_HARD_CUT_RETREAT = 32
#: The share of a chunk's room, at its end, where natural breaks are looked for first.
BREAK_WINDOW = 0.25
#: `split_rendered` stops searching the room when it is known to this share of the limit.
_RENDER_PRECISION = 1 / 256
#: Renderings of one chunk `split_rendered` tries at most (it needs about four).
_RENDER_TRIES = 24


def truncation_notice(omitted: int) -> str:
    """The last chunk of a reply cut short by the chunk cap."""
    return f"[message truncated - {omitted} characters omitted]"


def split_message(
    text: str, limit: PlatformLimit | int, *, max_chunks: int | None = MAX_CHUNKS
) -> list[str]:
    """Split `text` into chunks that each fit `limit` (an int counts characters).

    With `max_chunks` (None: no cap), at most that many chunks are sent, then one notice chunk.
    """
    platform = limit if isinstance(limit, PlatformLimit) else PlatformLimit(limit, "chars")
    _check_cap(max_chunks)
    if not text or text.isspace():
        return []
    # Every code point is at least one unit, so a longer text cannot fit.
    if len(text) <= platform.max_units and platform.fits(text):
        return [text]
    return [raw for raw, _ in _Splitter(text, platform).split(max_chunks, None)]


def split_rendered(
    text: str,
    limit: PlatformLimit,
    render: Callable[[str], str],
    *,
    max_chunks: int | None = MAX_CHUNKS,
) -> list[tuple[str, str]]:
    """`text` in (raw, rendered) chunks whose `render`ing fits `limit`, each as full as it can be.

    The raw text of each chunk is split as `split_message` does, with the room searched so that
    its rendering is as long as fits (markup that grows the text, JSON around it). A chunk whose
    rendering cannot fit however small it is comes back over the limit, for the caller to judge.
    """
    _check_cap(max_chunks)
    if not text or text.isspace():
        return []
    return _Splitter(text, limit).split(max_chunks, render)


def _check_cap(max_chunks: int | None) -> None:
    if max_chunks is not None and max_chunks < 1:
        raise ValueError(f"max_chunks must be at least 1 or None, got {max_chunks}")


class _Splitter:
    """One split of one text: indices into it, its fences and its grapheme boundaries."""

    def __init__(self, text: str, limit: PlatformLimit) -> None:
        self._text = text
        self._length = len(text)
        self._limit = limit
        self._graphemes = GraphemeIndex(text)
        self._fences = FenceMap(text, keep=self._wrappable)
        self._codec = "utf-16-le" if limit.unit == "utf16" else "utf-8"

    def split(
        self, max_chunks: int | None, render: Callable[[str], str] | None
    ) -> list[tuple[str, str]]:
        """(raw, rendered) chunks; without `render` the rendering is the raw text itself."""
        chunks: list[tuple[str, str]] = []
        start = self._next_start(0)
        while start < self._length:
            if max_chunks is not None and len(chunks) >= max_chunks:
                notice = truncation_notice(self._length - start)
                chunks.append((notice, render(notice) if render is not None else notice))
                break
            if render is None:
                chunk, cut = self._take(start, self._limit.max_units)
                chunks.append((chunk, chunk))
            else:
                chunk, cut, rendered = self._take_rendered(start, render)
                chunks.append((chunk, rendered))
            start = self._next_start(cut)
        return chunks

    # -- one chunk ------------------------------------------------------------------------

    def _take_rendered(self, start: int, render: Callable[[str], str]) -> tuple[str, int, str]:
        """The fullest chunk at `start` whose rendering fits, where it ends, and the rendering.

        The room for the raw text is searched between a room known to fit and one known not to,
        by where a straight line through their renderings' sizes meets the limit (a rendering
        grows about in proportion to its text), halving instead when that gained too little.
        """
        limit = self._limit.max_units
        precision = max(1, int(limit * _RENDER_PRECISION))
        fits_room, fits_size = 0, 0
        too_big_room, too_big_size = limit, 0
        best: tuple[str, int, str] | None = None
        smallest: tuple[str, int, str] | None = None
        room, previous_interval = limit, 0
        for _ in range(_RENDER_TRIES):
            chunk, cut = self._take(start, room)
            rendered = render(chunk)
            size = self._limit.measure(rendered)
            if size <= limit:
                best, fits_room, fits_size = (chunk, cut, rendered), room, size
                if smallest is None or cut >= self._length:
                    break  # the whole room, or the whole rest of the text, fits
            else:
                smallest, too_big_room, too_big_size = (chunk, cut, rendered), room, size
            interval = too_big_room - fits_room
            if interval <= precision:
                break
            if previous_interval and interval > previous_interval // 2:
                room = fits_room + interval // 2
            else:
                slope = (too_big_size - fits_size) / interval
                room = fits_room + int((limit - fits_size) / slope) if slope > 0 else 0
            room = min(max(room, fits_room + 1), too_big_room - 1)
            previous_interval = interval
        if best is not None:
            return best
        assert smallest is not None  # nothing fitted, so something was too big
        return smallest

    def _take(self, start: int, room: int) -> tuple[str, int]:
        """The chunk starting at `start` (a boundary before non-whitespace) and where it ends,
        taking at most `room` units."""
        reopened = self._fences.body_at(start)
        prefix = reopened.opener + "\n" if reopened is not None else ""
        budget = room - self._limit.measure(prefix)
        first = self._first_visible(start)
        end = self._limit.fit_end(self._text, start, budget)
        if self._graphemes.floor(end, known=start) <= first:
            if start < first:
                start = first  # the indentation leaves no room for the first cluster: drop it
                end = self._limit.fit_end(self._text, start, budget)
            if end <= first or (prefix and self._graphemes.floor(end, known=start) <= first):
                return self._take_squeezed(first, room)
        if end == self._length:
            fence = self._fences.zone_at(self._length)
            if fence is None:
                return self._emit(prefix, start, end, None), end
            if self._limit.fit_end(self._text, start, budget - self._suffix_units(fence)) == end:
                return self._emit(prefix, start, end, fence), end
        cut, fence = self._choose_cut(start, first + 1, end, budget)
        chunk = self._emit(prefix, start, cut, fence)
        if fence is not None and cut >= fence.content_end:
            # Only blank lines were left of the block: the added closer stands for its own.
            cut = fence.close_end
        return chunk, cut

    def _take_squeezed(self, first: int, room: int) -> tuple[str, int]:
        """No room for the first visible cluster after the indentation or reopened fence.

        The chunk is sent without them; only a cluster wider than the whole limit is cut.
        """
        end = self._limit.fit_end(self._text, first, room)
        if end > first:
            cut = self._graphemes.floor(end, known=first)
            cut = cut if cut > first else end
            return self._emit("", first, cut, None), cut
        # A single code point wider than the whole limit: sent alone rather than dropped.
        return self._text[first], first + 1

    def _choose_cut(self, start: int, low: int, end: int, budget: int) -> tuple[int, Fence | None]:
        """Where the chunk ends, and the fence it must close there if the cut is inside one.

        `low` is the least cut that keeps a visible character in the chunk; `end` is where the
        budget runs out.
        """
        graphemes = self._graphemes
        high = graphemes.floor(end, known=start)
        if high < low:
            return end, None  # one cluster wider than the limit: cut between its code points
        near = max(low, self._window_start(start, end, budget))
        gaps = self._fences.gaps(low, high)
        cut = self._natural_break(_from(gaps, near), start)
        if cut is not None:
            return cut, None
        fence = self._fences.zone_at(high)
        if fence is None:
            # No break near the end: what follows the last break is one run without any.
            cut = self._last_break(gaps, start)
            return (cut if cut is not None else self._hard_cut(low, high, start)), None
        if low <= fence.open_start and self._fits_whole(fence):
            return fence.open_start, None  # the next chunk has room for the whole block
        inner_end = self._limit.fit_end(self._text, start, budget - self._suffix_units(fence))
        inner_high = graphemes.floor(min(inner_end, fence.content_end), known=start)
        inner_low = max(low, fence.content_start + 1)
        if inner_high >= inner_low:
            stretch = [(inner_low, inner_high)]
            cut = self._natural_break(_from(stretch, near), start)
            if cut is None:
                cut = self._last_break(stretch, start)
            return (cut if cut is not None else self._hard_cut(inner_low, inner_high, start)), fence
        if low <= fence.open_start:
            return fence.open_start, None
        blank_cut = graphemes.floor(inner_end, known=start)
        if low <= blank_cut and fence.body_start <= blank_cut:
            # The opener and blank lines fill the room: send them as an empty block and
            # reopen it for the code (only a block padded with blank lines gets here).
            return blank_cut, fence
        # No room to split this block as a block: split it as plain text (documented above).
        return high, None

    def _window_start(self, start: int, end: int, budget: int) -> int:
        """Where the last `BREAK_WINDOW` of the budget begins, for a stretch ending at `end`."""
        units = int(budget * BREAK_WINDOW)
        if units <= 0:
            return end
        tail_start = max(start, end - units)  # every code point is at least one unit
        tail = self._text[tail_start:end]
        if self._limit.unit == "chars" or tail.isascii():
            return tail_start
        if self._limit.unit == "utf16":
            encoded, width = tail.encode("utf-16-le", "surrogatepass"), 2
        else:
            encoded, width = tail.encode("utf-8", "surrogatepass"), 1
        excess = len(encoded) // width - units
        if excess <= 0:
            return tail_start
        # The code points of the first `excess` units leave the window; one cut in half by
        # that count leaves too ("replace" counts it), so the window never exceeds its units.
        return tail_start + len(encoded[: excess * width].decode(self._codec, "replace"))

    def _fits_whole(self, fence: Fence) -> bool:
        """Whether the block, fence lines and all, fits one chunk of its own."""
        end = fence.close_end if fence.closed else self._length
        closer = 0 if fence.closed else self._suffix_units(fence)
        return (
            self._limit.fit_end(self._text, fence.open_start, self._limit.max_units - closer) >= end
        )

    def _emit(self, prefix: str, start: int, cut: int, fence: Fence | None) -> str:
        body = self._text[start:cut].rstrip()
        stop = start + len(body)
        if stop < cut and not self._graphemes.is_boundary(stop, known=start):
            # The stripped whitespace carried a mark of the cluster before it: keep the cluster.
            body = self._text[start : self._graphemes.ceil(stop, known=start)]
        suffix = "\n" + fence.closer if fence is not None else ""
        return prefix + body + suffix

    # -- breaks ---------------------------------------------------------------------------

    def _natural_break(self, stretches: list[tuple[int, int]], start: int) -> int | None:
        """The best natural cut within the stretches (rightmost first), or None."""
        for level in (self._paragraph_cuts, self._line_cuts, self._sentence_cuts, self._space_cuts):
            cut = self._natural_break_at(level, stretches, start)
            if cut is not None:
                return cut
        return None

    def _natural_break_at(
        self,
        level: Callable[[int, int], Iterator[int]],
        stretches: list[tuple[int, int]],
        start: int,
        floor: int | None = None,
    ) -> int | None:
        """The rightmost cut of one level within the stretches (rightmost first), if any is
        after `floor`."""
        for low, high in stretches:
            if floor is not None:
                if high <= floor:
                    return None
                low = max(low, floor + 1)
            for candidate in level(low, high):
                # A line break after CR, a space after a Prepend mark: cut before the cluster.
                cut = self._graphemes.floor(candidate, known=start)
                if cut >= low and not self._looks_like_fence(cut):
                    return cut
        return None

    def _last_break(self, stretches: list[tuple[int, int]], start: int) -> int | None:
        """The rightmost natural cut within the stretches, of any level, or None."""
        best: int | None = None
        for level in (self._paragraph_cuts, self._line_cuts, self._sentence_cuts, self._space_cuts):
            found = self._natural_break_at(level, stretches, start, floor=best)
            if found is not None:
                best = found
        return best

    def _hard_cut(self, low: int, high: int, start: int) -> int:
        """The rightmost cut in `[low, high]` (a boundary) that does not start a fake fence."""
        cut = high
        for _ in range(_HARD_CUT_RETREAT):
            if cut < low:
                break
            if not self._looks_like_fence(cut):
                return cut
            cut = self._graphemes.floor(cut - 1, known=start)
        return high

    def _paragraph_cuts(self, low: int, high: int) -> Iterator[int]:
        return _rightmost(self._text, ("\n\n", "\r\n\r\n"), low, high, 0)

    def _line_cuts(self, low: int, high: int) -> Iterator[int]:
        # A CRLF is one cluster: cutting before its CR keeps the line break whole.
        return _rightmost(self._text, ("\n", "\r\n"), low, high, 0)

    def _sentence_cuts(self, low: int, high: int) -> Iterator[int]:
        # The cut falls after the punctuation mark; the whitespace after it starts the gap.
        return _rightmost(self._text, _SENTENCE_ENDS + _CJK_SENTENCE_ENDS, low, high, 1)

    def _space_cuts(self, low: int, high: int) -> Iterator[int]:
        return _rightmost(self._text, (" ", "\t"), low, high, 0)

    # -- helpers --------------------------------------------------------------------------

    def _first_visible(self, index: int) -> int:
        found = _NON_SPACE.search(self._text, index)
        return self._length if found is None else found.start()

    def _next_start(self, cut: int) -> int:
        """Where the chunk after a cut at `cut` starts: its first visible line or character."""
        first = self._first_visible(cut)
        if first >= self._length:
            return self._length
        newline = self._text.rfind("\n", cut, first)
        if newline >= 0:
            return newline + 1  # a new line keeps its indentation
        if first > cut and not self._graphemes.is_boundary(first, known=cut):
            return max(cut, self._graphemes.floor(first, known=cut))
        return first

    def _looks_like_fence(self, cut: int) -> bool:
        """Whether the next chunk would start mid-line with what reads as a fence line."""
        first = self._first_visible(cut)
        if not self._text.startswith(_FENCE_STARTS, first):
            return False
        return self._text.rfind("\n", cut, first) < 0

    def _suffix_units(self, fence: Fence) -> int:
        return self._limit.measure("\n" + fence.closer)

    def _wrappable(self, fence: Fence) -> bool:
        fence_lines = self._limit.measure(fence.opener + "\n") + self._suffix_units(fence)
        return fence_lines <= self._limit.max_units // 2


def _from(stretches: list[tuple[int, int]], low: int) -> list[tuple[int, int]]:
    """The parts of the stretches (rightmost first) at or after `low`."""
    return [(max(first, low), last) for first, last in stretches if last >= low]


def _rightmost(
    text: str, separators: tuple[str, ...], low: int, high: int, cut_after: int
) -> Iterator[int]:
    """Cuts at occurrences of any separator, rightmost first, within `[low, high]`.

    An occurrence at `p` cuts at `p + cut_after`; the separator itself may run past `high`,
    since it is dropped between chunks.
    """
    next_hit: dict[str, int] = {}
    for separator in separators:
        hit = text.rfind(separator, max(low - cut_after, 0), high - cut_after + len(separator))
        if hit >= 0:
            next_hit[separator] = hit
    while next_hit:
        separator = max(next_hit, key=next_hit.__getitem__)
        hit = next_hit[separator]
        yield hit + cut_after
        earlier = text.rfind(separator, max(low - cut_after, 0), hit + len(separator) - 1)
        if earlier >= 0:
            next_hit[separator] = earlier
        else:
            del next_hit[separator]
