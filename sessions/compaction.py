"""Size cap: before a session file passes it, older messages move to an archive beside it.

The live file keeps its meta line, one system message that names the archive (and how many
messages it took), and the most recent messages, about half the cap, so the next compaction is
far away and appends stay O(1) amortised. The archive is a whole JSONL session file (meta line
first); an earlier summary moves into it too, so the summaries chain every archive together.
Nothing is deleted: a crash between writing the archive and rewriting the live file leaves the
old live file intact (the next compaction archives those messages again, so an archive may
repeat messages, but none is ever lost). Blocking: run it in a worker thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import structlog

from bus import Message, MessageRole, SessionKey
from sessions.durable import atomic_write
from sessions.layout import archive_numbers, archive_path
from sessions.recovery import load_file

log = structlog.get_logger(__name__)

SUMMARY_PREFIX: Final = "[session compacted]"
# Room kept for the summary line, so the live file lands under its budget with it.
_SUMMARY_RESERVE = 512


def summary_message(moved: int, archive_name: str) -> Message:
    return Message.system(
        f"{SUMMARY_PREFIX} {moved} earlier messages were moved to {archive_name} "
        "beside this session file; older archives are named in its first lines."
    )


def is_compaction_summary(message: Message) -> bool:
    return message.role is MessageRole.SYSTEM and message.content.startswith(SUMMARY_PREFIX)


def compact_file(
    path: Path, key: SessionKey, *, keep_bytes: int, incoming_bytes: int, name_was_cut: bool
) -> bool:
    """Archive the older messages of `path`; False when there is nothing worth moving."""
    loaded = load_file(path, key, name_was_cut=name_was_cut)
    if loaded is None:
        return False
    meta_line = loaded.meta.touched().to_line()
    budget = keep_bytes - incoming_bytes - len(meta_line) - _SUMMARY_RESERVE
    keep_from = len(loaded.lines)
    kept_bytes = 0
    while keep_from and kept_bytes + len(loaded.lines[keep_from - 1]) + 1 <= budget:
        keep_from -= 1
        kept_bytes += len(loaded.lines[keep_from]) + 1
    moved = loaded.messages[:keep_from]
    if not moved or all(is_compaction_summary(message) for message in moved):
        return False
    numbers = archive_numbers(path)
    archive = archive_path(path, (numbers[-1] if numbers else 0) + 1)
    atomic_write(
        archive,
        [meta_line, *(raw + b"\n" for raw in loaded.lines[:keep_from])],
        replace=False,
    )
    moved_count = sum(not is_compaction_summary(message) for message in moved)
    summary = summary_message(moved_count, archive.name).to_line()
    size = atomic_write(
        path, [meta_line, summary, *(raw + b"\n" for raw in loaded.lines[keep_from:])]
    )
    log.info(
        "sessions.compacted",
        path=str(path),
        archived=moved_count,
        archive=archive.name,
        kept=len(loaded.lines) - keep_from,
        size=size,
    )
    return True
