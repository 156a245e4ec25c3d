"""Replaying the journal's outcomes into session files, idempotently.

Session files are written behind the journal. After a crash, the last outcomes before it may
or may not have reached their files: each file holds some prefix of its outcomes' messages at
its tail (appends are in order). The longest such prefix is found by comparing messages
(their timestamps make them unique) and only the rest is appended, so running this twice, or
on outcomes that were all written, changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from bus import Message, SessionKey
from gateway.turn.journal.records import Outcome
from sessions import SessionManager

log = structlog.get_logger(__name__)


def missing_suffix(existing: Sequence[Message], expected: Sequence[Message]) -> list[Message]:
    """What of `expected` is not yet at the end of `existing` (which holds a prefix of it)."""
    for written in range(min(len(existing), len(expected)), 0, -1):
        if list(existing[len(existing) - written :]) == list(expected[:written]):
            return list(expected[written:])
    return list(expected)


async def restore_sessions(sessions: SessionManager, outcomes: Sequence[Outcome]) -> int:
    """Append what each outcome's session file lacks; the number of messages appended."""
    by_session: dict[str, list[Message]] = {}
    for outcome in outcomes:
        if outcome.messages:
            by_session.setdefault(outcome.session, []).extend(outcome.messages)
    appended = 0
    for session, expected in by_session.items():
        key = SessionKey.parse(session)
        existing = (await sessions.get(key)).messages
        missing = missing_suffix(existing, expected)
        if missing:
            await sessions.append_all(key, missing)
            appended += len(missing)
    if appended:
        log.info("journal.sessions_restored", sessions=len(by_session), messages=appended)
    return appended
