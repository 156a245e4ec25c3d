"""The built-in agent: repeats the user's words, streamed in pieces like a slow model.

It needs no network and no key, so a fresh install answers at once, and it exercises the whole
streaming path (snapshots, edits, typing) the way a real model does.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import TYPE_CHECKING

import regex

from bus import TokenUsage
from gateway.agents.base import Agent, AgentReply, AgentTurn, SnapshotSink
from gateway.agents.errors import AgentError, AgentFailure
from gateway.agents.snapshots import DEFAULT_PACING, SnapshotPacing

if TYPE_CHECKING:
    from config import EchoAgentConfig

#: Where a word starts after white space: the end of each run of white space. The standard
#: library's engine: `regex`'s look-behind at every position costs tens of microseconds a line.
_WHITESPACE_RUN = re.compile(r"\s+(?=\S)")
_GRAPHEME = regex.compile(r"\X")


def split_into_pieces(text: str, pieces: int) -> list[str]:
    """Cut `text` into at most `pieces` consecutive non-empty pieces of about equal length.

    Cuts fall before a word where the text has words; text without spaces (Chinese, Japanese)
    is cut between grapheme clusters, so no emoji or accented letter is ever broken.
    """
    if not text:
        return []
    if pieces <= 1:
        return [text]
    cut_points = [m.end() for m in _WHITESPACE_RUN.finditer(text)]
    if not cut_points:
        cut_points = [m.start() for m in _GRAPHEME.finditer(text)][1:]
    cuts: list[int] = []
    candidate = 0
    for index in range(1, max(1, pieces)):
        target = len(text) * index / pieces
        # The cut points are sorted and so are the targets: one forward scan finds them all.
        while candidate + 1 < len(cut_points) and abs(cut_points[candidate + 1] - target) <= abs(
            cut_points[candidate] - target
        ):
            candidate += 1
        if candidate < len(cut_points) and (not cuts or cut_points[candidate] > cuts[-1]):
            cuts.append(cut_points[candidate])
    bounds = [0, *cuts, len(text)]
    return [text[start:end] for start, end in itertools.pairwise(bounds)]


def count_words(text: str) -> int:
    return len(text.split())


class EchoAgent(Agent):
    """Answers with the user's own text, `pieces` pieces `delay_s` apart."""

    kind = "echo"

    def __init__(
        self,
        *,
        delay_s: float = 0.0,
        pieces: int = 3,
        snapshots: SnapshotPacing = DEFAULT_PACING,
        fail_when: str | None = None,
    ) -> None:
        self._delay_s = max(0.0, delay_s)
        self._fail_when = fail_when or None
        self._pieces = max(1, pieces)
        self._snapshots = snapshots

    @classmethod
    def from_config(cls, config: EchoAgentConfig) -> EchoAgent:
        return cls(delay_s=config.delay_s, pieces=config.pieces, fail_when=config.fail_when)

    async def run(self, turn: AgentTurn, on_snapshot: SnapshotSink) -> AgentReply:
        text = turn.message.content
        if self._fail_when is not None and self._fail_when in text:
            raise AgentError(
                f"the echo agent fails messages containing {self._fail_when!r} (fail_when)",
                failure=AgentFailure.UNAVAILABLE,
            )
        stream = self._snapshots.stream(on_snapshot)
        for index, piece in enumerate(split_into_pieces(text, self._pieces)):
            if index and self._delay_s:
                # Stands in for the time a model takes to produce the next piece.
                await asyncio.sleep(self._delay_s)
            await stream.append(piece)
        content = await stream.finish()
        words = count_words(text)
        return AgentReply(content, TokenUsage(input_tokens=words, output_tokens=words))
