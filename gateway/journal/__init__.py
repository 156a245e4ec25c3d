"""The profile's journal: what it received, answered and delivered, on the write-ahead log."""

from gateway.journal.fixup import restore_sessions
from gateway.journal.journal import Journal, Recovery
from gateway.journal.records import Outcome, Received
from gateway.journal.state import JournalState

__all__ = ["Journal", "JournalState", "Outcome", "Received", "Recovery", "restore_sessions"]
