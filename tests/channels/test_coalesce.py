"""The coalescing splitter: octos' examples, our improvements, and properties over mixed text."""

from __future__ import annotations

import itertools
import random
import re

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from channels.split import (
    BREAK_WINDOW,
    MAX_CHUNKS,
    PLATFORM_LIMITS,
    PlatformLimit,
    split_message,
    split_rendered,
    truncation_notice,
)
from channels.split.fences import find_fences
from channels.split.graphemes import GraphemeIndex

_CLUSTER = regex.compile(r"\X", regex.DOTALL)
_FENCE_LINE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
_NOTICE = re.compile(r"\[message truncated - (\d+) characters omitted\]")


# -- checking helpers ------------------------------------------------------------------------


def visible(text: str) -> str:
    return "".join(text.split())


def is_fence_line(line: str) -> bool:
    return _FENCE_LINE.fullmatch(line.rstrip("\r")) is not None


def unbalanced_fence(chunk: str) -> str | None:
    """The opener line of a fence the chunk leaves open, parsed independently of the splitter."""
    open_marker: str | None = None
    open_line = ""
    for line in chunk.split("\n"):
        match = _FENCE_LINE.fullmatch(line.rstrip("\r"))
        if match is None:
            continue
        marker, rest = match.groups()
        if open_marker is None:
            if marker[0] == "`" and "`" in rest:
                continue
            open_marker, open_line = marker, line
        elif marker[0] == open_marker[0] and len(marker) >= len(open_marker) and not rest.strip():
            open_marker = None
    return open_line if open_marker is not None else None


def without_added_fence_lines(text: str, chunks: list[str]) -> list[str]:
    """Each chunk without the fence lines the splitter added, checking the rest against `text`.

    A reopened opener starts a chunk whose text continues inside a code body, and an added
    closer ends one; in the texts generated here a body never starts with a fence marker, so a
    fence line that does not match the input at that point was added by the splitter.
    """
    source = visible(text)
    position = 0
    originals: list[str] = []
    for chunk in chunks:
        lines = chunk.split("\n")
        if is_fence_line(lines[0]) and not source.startswith(visible(lines[0]), position):
            lines = lines[1:]
        if len(lines) > 1 and is_fence_line(lines[-1]):
            before = visible("\n".join(lines[:-1]))
            if not source.startswith(before + visible(lines[-1]), position):
                lines = lines[:-1]
        original = "\n".join(lines)
        assert source.startswith(visible(original), position), (chunk, source[position:][:80])
        position += len(visible(original))
        originals.append(original)
    assert position == len(source), "characters of the input are missing from the chunks"
    return originals


def clusters(text: str) -> list[str]:
    return [cluster for cluster in _CLUSTER.findall(text) if not cluster.isspace()]


def widest_cluster(text: str, limit: PlatformLimit) -> int:
    return max((limit.measure(cluster) for cluster in _CLUSTER.findall(text)), default=1)


# -- octos' examples (seed 10.2 / 10.4) --------------------------------------------------------


def test_empty_input_gives_no_chunks() -> None:
    assert split_message("", 100) == []


def test_whitespace_only_input_gives_no_chunks() -> None:
    assert split_message(" \n\t \n", 100) == []
    assert split_message(" " * 500, 100) == []


def test_input_that_fits_is_returned_unchanged() -> None:
    text = "  Hello, world!  \n\n```python\nprint(1)\n"
    assert split_message(text, len(text)) == [text]


# Octos searched each level over the whole stretch; here over its last quarter (BREAK_WINDOW),
# so each example's limit puts its break there.


def test_splits_at_paragraph() -> None:
    text = "First paragraph here.\n\nSecond paragraph here."
    assert split_message(text, 24) == ["First paragraph here.", "Second paragraph here."]


def test_paragraph_beats_a_later_newline() -> None:
    text = "A paragraph of thirty one chars\n\nline\nx continues beyond the limit"
    assert split_message(text, 40) == [
        "A paragraph of thirty one chars",
        "line\nx continues beyond the limit",
    ]


def test_splits_at_newline() -> None:
    text = "First line of text\nSecond line of text"
    assert split_message(text, 22) == ["First line of text", "Second line of text"]


def test_splits_at_sentence() -> None:
    text = "First sentence here. Second sentence here."
    assert split_message(text, 24) == ["First sentence here.", "Second sentence here."]


@pytest.mark.parametrize("mark", ["!", "?"])
def test_sentence_also_ends_at_exclamation_and_question(mark: str) -> None:
    text = f"Is this the first one{mark} And then another one follows."
    assert split_message(text, 26)[0] == f"Is this the first one{mark}"


def test_a_break_early_in_the_room_does_not_leave_a_chunk_mostly_empty() -> None:
    text = "Short intro.\n\n" + "word " * 20
    assert split_message(text, 40) == [
        "Short intro.\n\nword word word word word",
        "word word word word word word word word",
        "word word word word word word word",
    ]


def test_a_run_without_breaks_near_the_end_is_kept_whole_when_it_fits() -> None:
    text = "see https://example.org/a/long/path/x?y=1 now"
    assert split_message(text, 40) == ["see", "https://example.org/a/long/path/x?y=1", "now"]


def test_splits_at_space() -> None:
    assert split_message("alpha beta gamma delta", 12) == ["alpha beta", "gamma delta"]


def test_hard_cut_without_any_break() -> None:
    assert split_message("abcdefghij" * 3, 10) == ["abcdefghij"] * 3


def test_cjk_sentences_break_without_spaces() -> None:
    text = "今天天气很好。我们去公园散步吧！你觉得怎么样？"
    assert split_message(text, 16) == ["今天天气很好。我们去公园散步吧！", "你觉得怎么样？"]


def test_chunk_cap_adds_a_truncation_chunk() -> None:
    chunks = split_message("abcdefghij" * 100, 10)
    assert len(chunks) == MAX_CHUNKS + 1 == 51
    assert chunks[:50] == ["abcdefghij"] * 50
    assert chunks[-1] == "[message truncated - 500 characters omitted]"


def test_truncation_counts_the_characters_not_sent() -> None:
    text = "aaaa bbbb cccc dddd eeee"
    assert split_message(text, 4, max_chunks=2) == ["aaaa", "bbbb", truncation_notice(14)]
    assert split_message(text, 4, max_chunks=None) == ["aaaa", "bbbb", "cccc", "dddd", "eeee"]


def test_truncation_counts_code_points_not_bytes() -> None:
    text = "中文" * 30  # 60 characters, 180 bytes
    chunks = split_message(text, PlatformLimit(30, "bytes"), max_chunks=2)
    assert chunks[:2] == ["中文" * 5] * 2
    assert chunks[2] == truncation_notice(40)


def test_max_chunks_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_chunks"):
        split_message("abc def", 3, max_chunks=0)


# -- units --------------------------------------------------------------------------------------


def test_telegram_counts_utf16_units() -> None:
    telegram = PLATFORM_LIMITS["telegram"]
    chunks = split_message("😀" * 4096, telegram)
    assert chunks == ["😀" * 2048, "😀" * 2048]
    assert split_message("中" * 4096, telegram) == ["中" * 4096]


def test_discord_counts_characters() -> None:
    assert split_message("😀" * 2000, PLATFORM_LIMITS["discord"]) == ["😀" * 2000]
    assert len(split_message("😀" * 2001, PLATFORM_LIMITS["discord"])) == 2


def test_wecom_counts_utf8_bytes() -> None:
    wecom = PLATFORM_LIMITS["wecom"]
    chunks = split_message("中" * 1000, wecom)
    assert chunks == ["中" * 682, "中" * 318]
    assert all(len(chunk.encode()) <= 2048 for chunk in chunks)


def test_an_int_limit_counts_characters() -> None:
    assert split_message("ab cd", 2) == split_message("ab cd", PlatformLimit(2, "chars"))


@pytest.mark.parametrize(
    ("name", "max_units", "unit"),
    [
        ("telegram", 4096, "utf16"),
        ("discord", 2000, "chars"),
        ("slack", 4000, "chars"),
        ("twilio", 1600, "chars"),
        ("whatsapp", 4096, "chars"),
        ("line", 5000, "utf16"),
        ("wecom", 2048, "bytes"),
        ("wecom-bot", 20_480, "bytes"),
    ],
)
def test_documented_platform_limits(name: str, max_units: int, unit: str) -> None:
    assert PLATFORM_LIMITS[name] == PlatformLimit(max_units, unit)  # type: ignore[arg-type]


def test_every_shipped_platform_has_a_limit() -> None:
    expected = {"matrix", "feishu", "lark", "qq-bot", "email", "api", "cli", "wecom-bot"}
    assert expected <= set(PLATFORM_LIMITS)


@pytest.mark.parametrize(
    ("unit", "text", "budget", "end"),
    [
        ("chars", "ab😀cd", 3, 3),
        ("utf16", "ab😀cd", 3, 2),
        ("utf16", "ab😀cd", 4, 3),
        ("bytes", "a中b", 3, 1),
        ("bytes", "a中b", 4, 2),
        ("bytes", "a中b", 100, 3),
    ],
)
def test_fit_end_stops_between_code_points(unit: str, text: str, budget: int, end: int) -> None:
    limit = PlatformLimit(budget, unit)  # type: ignore[arg-type]
    assert limit.fit_end(text) == end
    assert limit.fits(text[:end])


def test_lone_surrogates_do_not_crash_measuring() -> None:
    text = "abc \ud800 def " * 10
    for unit in ("utf16", "bytes"):
        chunks = split_message(text, PlatformLimit(16, unit))
        assert visible("".join(chunks)) == visible(text)


# -- grapheme clusters --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cluster", ["👨‍👩‍👧‍👦", "🇫🇷", "👍🏽", "🏳️‍🌈", "e\u0301", "क्ष", "\u1100\u1161\u11a8"]
)
def test_clusters_are_never_split(cluster: str) -> None:
    text = cluster * 40
    limit = PlatformLimit(23, "utf16")
    chunks = split_message(text, limit, max_chunks=None)
    assert len(chunks) > 1
    for chunk in chunks:
        assert limit.fits(chunk)
        assert regex.fullmatch(rf"(?:{regex.escape(cluster)})+", chunk), chunk


def test_a_cluster_wider_than_the_limit_is_cut_between_code_points() -> None:
    family = "👨‍👩‍👧"  # 5 code points, 8 UTF-16 units
    limit = PlatformLimit(4, "utf16")
    chunks = split_message(family, limit)
    assert "".join(chunks) == family
    assert all(limit.fits(chunk) for chunk in chunks)


def test_a_code_point_wider_than_the_limit_is_sent_alone() -> None:
    assert split_message("😀😀", PlatformLimit(1, "utf16")) == ["😀", "😀"]


def test_a_combining_mark_on_a_space_stays_with_it() -> None:
    text = "word \u0301" * 10
    chunks = split_message(text, 7, max_chunks=None)
    assert clusters("".join(chunks)) == clusters(text)


def test_crlf_line_breaks_are_natural_breaks() -> None:
    text = "first line\r\nsecond line\r\nthird line"
    assert split_message(text, 24) == ["first line\r\nsecond line", "third line"]


# -- Markdown fences ----------------------------------------------------------------------------


def _code_block(info: str, lines: int) -> str:
    body = "\n".join(f"    value_{i} = compute({i})" for i in range(lines))
    return f"```{info}\n{body}\n```"


def test_a_split_fence_is_closed_and_reopened_with_its_info_string() -> None:
    text = "Here is the code:\n\n" + _code_block("python", 30) + "\n\nThat is all."
    chunks = split_message(text, 300, max_chunks=None)
    assert len(chunks) > 2
    for previous, chunk in itertools.pairwise(chunks):
        if previous.endswith("\n```") and unbalanced_fence(previous[:-4]) is not None:
            assert chunk.startswith("```python\n")
    assert all(unbalanced_fence(chunk) is None for chunk in chunks)
    assert all(len(chunk) <= 300 for chunk in chunks)
    # The block is longer than a chunk: it starts in the first, which is filled first.
    assert chunks[0].startswith("Here is the code:\n\n```python\n    value_0")


def test_fence_lines_count_toward_the_limit() -> None:
    text = _code_block("javascript", 40)
    limit = PlatformLimit(200, "bytes")
    chunks = split_message(text, limit, max_chunks=None)
    assert all(limit.fits(chunk) for chunk in chunks)
    assert all(chunk.startswith("```javascript\n") and chunk.endswith("\n```") for chunk in chunks)


def test_a_break_outside_the_fence_is_preferred() -> None:
    block = _code_block("", 3)
    text = "Some words before the code.\n" + block + "\nAnd some words after it."
    chunks = split_message(text, len(block) + 10)
    assert chunks[1] == block


def test_longer_and_tilde_fences_close_with_their_own_marker() -> None:
    for opener, closer in (("````md", "````"), ("~~~", "~~~")):
        body = "\n".join(f"line {i} of the block" for i in range(20))
        chunks = split_message(f"{opener}\n{body}\n{closer}", 120, max_chunks=None)
        assert len(chunks) > 1
        assert all(chunk.startswith(opener + "\n") for chunk in chunks)
        assert all(chunk.endswith("\n" + closer) for chunk in chunks)


def test_an_unclosed_fence_is_closed_in_every_chunk() -> None:
    body = "\n".join(f"x = {i}" for i in range(60))
    chunks = split_message("Intro.\n```sh\n" + body, 100, max_chunks=None)
    assert all(unbalanced_fence(chunk) is None for chunk in chunks)


def test_a_cut_never_leaves_a_chunk_starting_like_a_fence() -> None:
    text = "see the ```inline``` markers and ~~~ tildes in prose " * 5
    chunks = split_message(text, 9, max_chunks=None)
    assert not any(chunk.startswith(("```", "~~~")) for chunk in chunks)
    assert visible("".join(chunks)) == visible(text)


def test_a_fence_too_long_for_the_limit_is_split_as_plain_text() -> None:
    text = "```" + "x" * 50 + "\ncode line\n```"
    chunks = split_message(text, 20, max_chunks=None)
    assert all(len(chunk) <= 20 for chunk in chunks)
    assert visible("".join(chunks)) == visible(text)


def test_a_large_input_keeps_every_property() -> None:
    paragraph = "Lorem ipsum dolor sit amet, 中文句子。👩🏽‍💻 🇯🇵 done.\n"
    text = (paragraph * 40 + _code_block("rust", 50) + "\n\n") * 40
    limit = PLATFORM_LIMITS["telegram"]
    chunks = split_message(text, limit, max_chunks=None)
    assert all(limit.fits(chunk) for chunk in chunks)
    assert all(unbalanced_fence(chunk) is None for chunk in chunks)
    originals = without_added_fence_lines(text, chunks)
    assert [c for original in originals for c in clusters(original)] == clusters(text)


# -- the building blocks -------------------------------------------------------------------------


def test_fences_are_found_at_line_starts_only() -> None:
    text = "say ```x``` inline\n  ```py title\ncode\n  ````\nprose\n~~~\n```\nstill in\n~~~~\n```"
    fences = find_fences(text)
    assert [(f.opener, f.closer, f.closed) for f in fences] == [
        ("  ```py title", "  ```", True),
        ("~~~", "~~~", True),
        ("```", "```", False),
    ]
    first = fences[0]
    assert text[first.content_start : first.content_end] == "code"
    assert text[first.close_start : first.close_end] == "  ````"
    assert fences[2].close_end == len(text)


def test_a_backtick_line_with_backticks_after_it_opens_nothing() -> None:
    fences = find_fences("``` not `a` fence\ntext\n```")
    assert [(fence.open_start, fence.closed) for fence in fences] == [(23, False)]


_UNICODE_SOUP = st.text(
    alphabet=st.sampled_from(
        [
            "a",
            " ",
            "\n",
            "\r",
            "\u0301",
            "\u200d",
            "\ufe0f",
            "\U0001f1eb",
            "\U0001f1f7",
            "😀",
            "👨",
            "\U0001f3fd",
            "\u1100",
            "\u1161",
            "\u11a8",
            "각",
            "\u0915",
            "\u094d",
            "\u0600",
            "\u0903",
            "中",
        ]
    ),
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(text=_UNICODE_SOUP, order=st.randoms(use_true_random=False))
def test_grapheme_index_agrees_with_full_segmentation(text: str, order: random.Random) -> None:
    ends = {0}
    position = 0
    for cluster in _CLUSTER.findall(text):
        position += len(cluster)
        ends.add(position)
    index = GraphemeIndex(text)
    queries = list(range(len(text) + 1))
    order.shuffle(queries)
    for query in queries:
        assert index.is_boundary(query) == (query in ends), query
        assert index.floor(query) == max(end for end in ends if end <= query)
        assert index.ceil(query) == min(end for end in ends if end >= query)


# -- properties ----------------------------------------------------------------------------------

_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJ", min_size=1, max_size=12)
_CJK = st.text(alphabet="你好世界中文测试文本消息分割。！？，", min_size=1, max_size=20)
_SPECIAL_CLUSTERS = st.sampled_from(
    [
        "👨‍👩‍👧‍👦",
        "👩🏽‍💻",
        "🏳️‍🌈",
        "🇫🇷",
        "🇯🇵",
        "👍🏿",
        "1️⃣",
        "😀",
        "e\u0301",
        "a\u0308\u0323",
        "क्ष",
        "각",
    ]
)
_PUNCTUATION = st.sampled_from([". ", "! ", "? ", ", ", "`code` ", "。"])
_SPACE = st.sampled_from([" ", " ", " ", "\n", "\n\n", "  ", "\t", "\r\n"])
_RUNS = st.builds(
    lambda char, count: char * count,
    st.sampled_from(["x", "中", "😀", "🇫🇷"]),
    st.integers(20, 300),
)
_RANDOM = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="`~"), min_size=1, max_size=30
)
_BODY_LINE = st.builds(
    lambda indent, words: indent + " ".join(words),
    st.sampled_from(["", "  ", "    ", "\t"]),
    st.lists(st.one_of(_WORDS, _CJK, _SPECIAL_CLUSTERS), min_size=0, max_size=8),
)


def _fence_block(marker: str, info: str, lines: list[str], closed: bool) -> str:
    closer = f"\n{marker}\n" if closed else ""
    return f"\n{marker}{info}\n" + "\n".join(lines) + closer


_FENCE_PARTS = (
    st.sampled_from(["```", "````", "~~~"]),
    st.sampled_from(["", "python", "js", "sh", "rust title"]),
    st.lists(_BODY_LINE, min_size=0, max_size=25),
)
_FENCE = st.builds(_fence_block, *_FENCE_PARTS, st.just(True))
# Only the last block may be left open: an open one would swallow the fences after it.
_LAST_FENCE = st.one_of(st.just(""), st.builds(_fence_block, *_FENCE_PARTS, st.booleans()))
_PIECE = st.one_of(
    _WORDS, _WORDS, _CJK, _SPECIAL_CLUSTERS, _PUNCTUATION, _SPACE, _SPACE, _RUNS, _RANDOM, _FENCE
)
_TEXT = st.builds(
    lambda pieces, last: "".join(pieces) + last,
    st.lists(_PIECE, min_size=0, max_size=80),
    _LAST_FENCE,
)
_UNITS = st.sampled_from(["utf16", "chars", "bytes"])
_LIMIT_UNITS = st.one_of(st.integers(20, 200), st.integers(20, 5000))

_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _limit(text: str, unit: str, units: int) -> PlatformLimit:
    # Property 2 holds only when every cluster fits the limit (the documented exception).
    probe = PlatformLimit(1, unit)  # type: ignore[arg-type]
    return PlatformLimit(max(units, widest_cluster(text, probe)), unit)  # type: ignore[arg-type]


@_SETTINGS
@given(text=_TEXT, unit=_UNITS, units=_LIMIT_UNITS)
def test_chunks_fit_are_visible_and_keep_every_character(text: str, unit: str, units: int) -> None:
    limit = _limit(text, unit, units)
    chunks = split_message(text, limit, max_chunks=None)
    for chunk in chunks:
        assert limit.measure(chunk) <= limit.max_units
        assert chunk.strip(), "empty or whitespace-only chunk"
    originals = without_added_fence_lines(text, chunks)
    assert [c for original in originals for c in clusters(original)] == clusters(text)


@_SETTINGS
@given(text=_TEXT, unit=_UNITS, units=st.integers(64, 2000))
def test_every_opened_fence_is_closed_in_its_chunk(text: str, unit: str, units: int) -> None:
    limit = _limit(text, unit, units)
    chunks = split_message(text, limit, max_chunks=None)
    if len(chunks) > 1:
        assert [chunk for chunk in chunks if unbalanced_fence(chunk) is not None] == []


@_SETTINGS
@given(text=_TEXT, unit=_UNITS, units=_LIMIT_UNITS, cap=st.integers(1, 6))
def test_the_cap_keeps_the_first_chunks_and_counts_the_rest(
    text: str, unit: str, units: int, cap: int
) -> None:
    limit = _limit(text, unit, units)
    uncapped = split_message(text, limit, max_chunks=None)
    capped = split_message(text, limit, max_chunks=cap)
    if len(uncapped) <= cap:
        assert capped == uncapped
        return
    assert capped[:cap] == uncapped[:cap]
    assert len(capped) == cap + 1
    notice = _NOTICE.fullmatch(capped[-1])
    assert notice is not None
    omitted = int(notice.group(1))
    originals = without_added_fence_lines(text, uncapped)
    assert len(visible("".join(originals[cap:]))) <= omitted <= len(text)


@_SETTINGS
@given(text=_TEXT, unit=_UNITS, units=_LIMIT_UNITS)
def test_a_text_that_fits_comes_back_unchanged(text: str, unit: str, units: int) -> None:
    limit = PlatformLimit(units, unit)  # type: ignore[arg-type]
    if limit.fits(text) and text.strip():
        assert split_message(text, limit) == [text]


# -- filling: every chunk but the last as full as the break allows --------------------------------

#: Where the splitter may break: whitespace the levels look for, after a CJK sentence end.
_BREAKS = re.compile(r"[ \t\n]+|(?<=[。！？])")
_WHITESPACE_RUN = re.compile(r"\s+")


def allowed_shortfall(text: str, limit: PlatformLimit) -> int:
    """How far short of the limit a chunk other than the last may fall.

    The break is looked for in the last `BREAK_WINDOW` of the room; with none there the chunk
    ends before a run without any break (kept whole for the next chunk), and before a code
    block that fits a chunk whole. On top: whitespace dropped at the cut, a grapheme cluster
    not split, and a block's opener and leading blank lines with the closer they would need.
    """
    run = max((limit.measure(piece) for piece in _BREAKS.split(text)), default=0)
    blocks = [
        text[fence.open_start : fence.close_end]
        for fence in find_fences(text)
        if limit.measure(text[fence.open_start : fence.close_end]) <= limit.max_units
    ]
    block = max((limit.measure(b) for b in blocks), default=0)
    heads = [
        limit.measure(text[fence.open_start : fence.content_start] + "\n" + fence.closer)
        for fence in find_fences(text)
    ]
    spaces = max((limit.measure(m.group()) for m in _WHITESPACE_RUN.finditer(text)), default=0)
    window = int(limit.max_units * BREAK_WINDOW)
    slack = spaces + max(heads, default=0) + 2 * widest_cluster(text, limit)
    return max(window, run, block) + slack


@_SETTINGS
@given(text=_TEXT, unit=_UNITS, units=_LIMIT_UNITS)
def test_no_chunk_but_the_last_is_left_short(text: str, unit: str, units: int) -> None:
    limit = _limit(text, unit, units)
    chunks = split_message(text, limit, max_chunks=None)
    least = limit.max_units - allowed_shortfall(text, limit)
    for chunk in chunks[:-1]:
        assert limit.measure(chunk) >= least, (chunk, least)


_PROSE_WORDS = ["alpha", "beta", "中文", "👩🏽‍💻", "gamma.", "delta!", "e\u0301"]


@st.composite
def _prose(draw: st.DrawFn) -> str:
    """Words and breaks of every level, paragraphs far apart: where an early break would leave
    a chunk short."""
    paragraphs = draw(st.lists(st.integers(1, 120), min_size=1, max_size=12))
    words = itertools.cycle(_PROSE_WORDS)
    return "\n\n".join(
        " ".join(next(words) + ("\n" if i % 17 == 16 else "") for i in range(count))
        for count in paragraphs
    )


@_SETTINGS
@given(text=_prose(), unit=_UNITS, units=st.integers(40, 600))
def test_prose_fills_every_chunk_but_the_last_to_the_break_window(
    text: str, unit: str, units: int
) -> None:
    limit = PlatformLimit(units, unit)  # type: ignore[arg-type]
    chunks = split_message(text, limit, max_chunks=None)
    # The longest word with the space before it is the most a cut in the window can give up.
    least = limit.max_units - int(limit.max_units * BREAK_WINDOW) - limit.measure(" 👩🏽‍💻")
    assert all(limit.fits(chunk) for chunk in chunks)
    for chunk in chunks[:-1]:
        assert limit.measure(chunk) >= least, chunk


def _markup(text: str) -> str:
    """A rendering that grows text unevenly, as HTML escaping and JSON around it do."""
    return "<p>" + text.replace("&", "&amp;").replace("<", "&lt;").replace("\n", "<br>\n") + "</p>"


@_SETTINGS
@given(text=_TEXT, unit=_UNITS, units=st.integers(64, 3000))
def test_rendered_chunks_fit_keep_every_character_and_are_filled(
    text: str, unit: str, units: int
) -> None:
    limit = _limit(text, unit, units)
    pieces = split_rendered(text, limit, _markup, max_chunks=None)
    for raw, rendered in pieces:
        assert rendered == _markup(raw)
        assert limit.fits(rendered)
    assert_keeps_the_text(text, [raw for raw, _ in pieces])
    # Markup at most quadruples a unit ("<" is "&lt;"): the raw shortfall, scaled.
    growth = 5
    least = limit.max_units - growth * allowed_shortfall(text, limit) - limit.max_units // 64
    for _, rendered in pieces[:-1]:
        assert limit.measure(rendered) >= least


def assert_keeps_the_text(text: str, raws: list[str]) -> None:
    """The raw chunks keep every character of the text, in order, fences balanced."""
    originals = without_added_fence_lines(text, raws)
    assert [c for original in originals for c in clusters(original)] == clusters(text)
    if len(raws) > 1:
        assert [raw for raw in raws if unbalanced_fence(raw) is not None] == []


def test_a_rendering_that_doubles_the_text_still_fills_each_chunk() -> None:
    text = "\n\n".join("<tag> & words " * 12 for _ in range(60))
    limit = PlatformLimit(2000, "bytes")
    pieces = split_rendered(text, limit, _markup, max_chunks=None)
    sizes = [limit.measure(rendered) for _, rendered in pieces]
    assert all(size <= 2000 for size in sizes)
    assert all(size >= 2000 * (1 - BREAK_WINDOW) for size in sizes[:-1]), sizes
    total = limit.measure(_markup(text))
    assert len(pieces) <= -(-total // int(2000 * (1 - BREAK_WINDOW))), sizes
