"""The profile's journal: what it received, answered and delivered, on the write-ahead log."""

from gateway.turn.journal.journal import Journal, Recovery, restore_sessions
from gateway.turn.journal.records import (
    OPEN_SEND_STATUSES,
    Outcome,
    OwnerSend,
    Received,
    SendStatus,
)
from gateway.turn.journal.state import JournalState

__all__ = [
    "OPEN_SEND_STATUSES",
    "Journal",
    "JournalState",
    "Outcome",
    "OwnerSend",
    "Received",
    "Recovery",
    "SendStatus",
    "restore_sessions",
]
