"""A long mixed-script reply, and the checks every platform's split of it must pass.

The text mixes English prose, Chinese sentences, emoji (ZWJ families, flags, skin tones) and one
fenced code block. It avoids Markdown that a renderer would turn into other characters (no
emphasis, lists, headings, links, HTML), so the text a platform shows is the text sent, apart
from the code fences that Telegram turns into a `pre` entity.
"""

from __future__ import annotations

from collections.abc import Sequence

PROSE = (
    "The gateway splits a long reply at natural breaks, so that nobody reads half a word. "
    "Paragraphs come first, then lines, then sentences, then spaces. "
    "Only a word longer than a whole message is ever cut in its middle! "
    "Does that hold for every platform? It should. "
)
CJK = (
    "长回复会在自然的断点处拆分，每一段都不超过平台的限制。"
    "中文句子以句号结束，也可以用感叹号！或者问号？"
    "表情符号不会被切成两半。"
)
EMOJI = (
    "Emoji stay whole: 👨‍👩‍👧‍👦 a family, 🏳️‍🌈 a flag, 👩🏽‍💻 a coder, 🇯🇵 Japan, "
    "❤️‍🔥 a heart on fire, 🧑🏿‍🚀 an astronaut. "
)
CODE_INFO = "python"
CODE_LINES = tuple(
    [f"def greet{n}(name):\n    return 'hello ' + name + ' {n}'" for n in range(1, 31)]
)
SENTENCE_ENDS = frozenset(".!?。！？")
FENCE = "```"


def code_block() -> str:
    return f"{FENCE}{CODE_INFO}\n" + "\n".join(CODE_LINES) + f"\n{FENCE}"


def mixed_text(target_chars: int = 10_000) -> str:
    """About `target_chars` characters of paragraphs, with the code block in the middle."""
    kinds = (PROSE * 2, CJK * 3, EMOJI + PROSE, CJK + EMOJI)
    paragraphs: list[str] = []
    total = 0
    index = 0
    code_at = target_chars // 2
    code_placed = False
    while total < target_chars:
        if not code_placed and total >= code_at:
            paragraphs.append(code_block())
            code_placed = True
        else:
            paragraphs.append(kinds[index % len(kinds)].strip())
            index += 1
        total += len(paragraphs[-1]) + 2
    return "\n\n".join(paragraphs)


def is_fence_line(line: str) -> bool:
    return line.strip().startswith(FENCE)


def without_fences(text: str) -> str:
    return "\n".join(line for line in text.split("\n") if not is_fence_line(line))


def non_space(text: str) -> str:
    return "".join(text.split())


def fences_balanced(chunk: str) -> bool:
    return sum(1 for line in chunk.split("\n") if is_fence_line(line)) % 2 == 0


def break_is_natural(reference: str, end: int) -> bool:
    """Whether a chunk ending at `reference[:end]` ends at a paragraph, line, sentence or
    space boundary of the reference text."""
    return end >= len(reference) or reference[end].isspace() or reference[end - 1] in SENTENCE_ENDS


def chunk_ends(reference: str, chunks: Sequence[str]) -> list[int]:
    """Where each chunk ends in `reference`, matching their non-space characters in order.

    Both the chunks and the reference must be fence-free; raises AssertionError when the
    chunks do not spell the reference out exactly.
    """
    positions = [i for i, char in enumerate(reference) if not char.isspace()]
    ends: list[int] = []
    consumed = 0
    for chunk in chunks:
        visible = non_space(chunk)
        expected = "".join(reference[i] for i in positions[consumed : consumed + len(visible)])
        assert visible == expected, f"chunk {len(ends)} does not continue the text"
        consumed += len(visible)
        ends.append(positions[consumed - 1] + 1 if consumed else 0)
    assert consumed == len(positions), "the chunks end before the text does"
    return ends


def assert_split_well(original: str, chunks: Sequence[str], *, fences_shown: bool) -> None:
    """Every non-space character of `original` is shown, in order and nothing else besides
    code fences (a platform may drop their info string, and the splitter closes and reopens
    a fence it has to cut); every non-last chunk ends at a natural break; code fences (where
    the platform shows them) are balanced in each chunk."""
    assert len(chunks) > 1, "a reply this long must take several messages"
    if fences_shown:
        unbalanced = [i for i, chunk in enumerate(chunks) if not fences_balanced(chunk)]
        assert not unbalanced, f"chunks with an open code fence: {unbalanced}"
    reference = without_fences(original)
    ends = chunk_ends(reference, [without_fences(chunk) for chunk in chunks])
    unnatural = [
        (i, reference[max(0, end - 15) : end + 15])
        for i, end in enumerate(ends[:-1])
        if not break_is_natural(reference, end)
    ]
    assert not unnatural, f"chunks cut mid-word: {unnatural}"
