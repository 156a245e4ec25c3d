"""A deterministic corpus that looks like agent replies: prose, CJK, emoji and fenced code.

The same seed and size always give the same text, so figures from different runs compare.
Proportions are those of a chatty technical assistant: mostly English prose in paragraphs with
the odd emoji (ZWJ sequences, flags, skin tones among them), some Chinese, and a fenced code
block every few paragraphs.
"""

from __future__ import annotations

import random

_WORDS = (
    "the",
    "a",
    "an",
    "agent",
    "reply",
    "message",
    "gateway",
    "channel",
    "session",
    "limit",
    "split",
    "chunk",
    "stream",
    "edit",
    "token",
    "user",
    "server",
    "client",
    "request",
    "response",
    "error",
    "retry",
    "backoff",
    "queue",
    "worker",
    "task",
    "config",
    "profile",
    "platform",
    "telegram",
    "discord",
    "slack",
    "webhook",
    "latency",
    "throughput",
    "memory",
    "is",
    "are",
    "was",
    "will",
    "can",
    "should",
    "must",
    "may",
    "not",
    "only",
    "also",
    "then",
    "when",
    "while",
    "because",
    "so",
    "if",
    "fast",
    "slow",
    "large",
    "small",
    "simple",
    "robust",
    "correct",
    "careful",
    "quick",
    "every",
    "each",
    "one",
    "many",
)
#: The CJK Unified Ideographs block: common Chinese characters, all in the BMP.
_HANZI_FIRST, _HANZI_LAST = 0x4E00, 0x9FA5
_CJK_STOPS = "。。。！？，，，"
_EMOJI = (
    "😀",
    "🎉",
    "👍🏽",
    "👩🏽\u200d💻",
    "👨\u200d👩\u200d👧\u200d👦",
    "🇫🇷",
    "🇯🇵",
    "🏳️\u200d🌈",
    "✅",
    "1️⃣",
    "🚀",
)
_LANGUAGES = ("python", "js", "rust", "sh", "", "yaml")
_IDENTIFIERS = ("value", "chunk", "limit", "session", "reply", "offset", "count", "result")


def _english_paragraph(rng: random.Random) -> str:
    sentences = []
    for _ in range(rng.randint(2, 7)):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 18))]
        if rng.random() < 0.15:
            words.insert(rng.randrange(len(words)), rng.choice(_EMOJI))
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words)), f"`{rng.choice(_IDENTIFIERS)}`")
        sentence = " ".join(words)
        sentences.append(sentence[0].upper() + sentence[1:] + rng.choice(".....!?"))
    return " ".join(sentences)


def _chinese_paragraph(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(3, 9)):
        length = rng.randint(6, 24)
        parts.append("".join(chr(rng.randint(_HANZI_FIRST, _HANZI_LAST)) for _ in range(length)))
        parts.append(rng.choice(_CJK_STOPS))
        if rng.random() < 0.1:
            parts.append(rng.choice(_EMOJI))
    return "".join(parts)


def _list_block(rng: random.Random) -> str:
    return "\n".join(f"- {_english_paragraph(rng)[:80]}" for _ in range(rng.randint(2, 6)))


def _code_block(rng: random.Random) -> str:
    lines = []
    depth = 0
    for _ in range(rng.randint(4, 40)):
        name, other = rng.choice(_IDENTIFIERS), rng.choice(_IDENTIFIERS)
        lines.append("    " * depth + f"{name} = compute({other}, {rng.randint(0, 999)})")
        depth = max(0, min(3, depth + rng.choice((-1, 0, 0, 1))))
    return f"```{rng.choice(_LANGUAGES)}\n" + "\n".join(lines) + "\n```"


def generate(size: int, seed: int = 0) -> str:
    """`size` characters (code points) of mixed reply text, the same for the same seed."""
    rng = random.Random(seed)
    blocks: list[str] = []
    total = 0
    while total < size:
        roll = rng.random()
        if roll < 0.55:
            block = _english_paragraph(rng)
        elif roll < 0.78:
            block = _chinese_paragraph(rng)
        elif roll < 0.85:
            block = _list_block(rng)
        else:
            block = _code_block(rng)
        blocks.append(block)
        total += len(block) + 2
    return "\n\n".join(blocks)[:size]
