"""Where a reply goes: which thread of a conversation answers which post.

In channels the bot answers in a thread (on the post, or in the thread the post is in); in DMs
it answers plainly unless the user wrote in a thread. The gateway's replies name the post they
answer (`reply_to`, the post's `ts`; later chunks of a long reply carry it in the `ANSWERS`
metadata instead), so the channel remembers, for each post it published, the thread its answer
belongs in. The book is bounded (oldest forgotten first); a post it no longer remembers is
answered in a thread on itself (in a channel) or plainly (in a DM), which is right unless it was
itself inside a thread. An outbound message may also name the thread outright with
`metadata["thread_ts"]`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bus import ANSWERS, OutboundMessage
from channels.lifecycle.bounded import RecentMap

#: Outbound metadata key naming the thread to post in (Slack's `thread_ts`) outright.
THREAD_TS = "thread_ts"


def is_direct_chat(chat_id: str) -> bool:
    """Slack's DM conversation ids start with D (group DMs with G are threaded like channels)."""
    return chat_id.startswith("D")


class ThreadBook:
    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._threads: RecentMap[tuple[str, str], str | None] = RecentMap(max_entries)

    def __len__(self) -> int:
        return len(self._threads)

    def remember(self, chat_id: str, ts: str, thread_ts: str | None) -> None:
        """Answers to post `ts` go to `thread_ts` (None: into the conversation itself)."""
        self._threads.remember((chat_id, ts), thread_ts)

    def thread_for(self, message: OutboundMessage) -> str | None:
        """The `thread_ts` to post `message` with, or None to post it plainly."""
        explicit = message.metadata.get(THREAD_TS)
        if isinstance(explicit, str) and explicit:
            return explicit
        anchor = message.reply_to or _first_answered(message.metadata)
        if not anchor:
            return None
        key = (message.chat_id, anchor)
        if key in self._threads:
            return self._threads[key]
        return None if is_direct_chat(message.chat_id) else anchor


def _first_answered(metadata: Mapping[str, object]) -> str | None:
    answers = metadata.get(ANSWERS)
    if isinstance(answers, Sequence) and not isinstance(answers, str) and answers:
        first = answers[0]
        return first if isinstance(first, str) else None
    return None
