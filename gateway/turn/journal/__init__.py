"""The profile's journal: what it received, answered and delivered, on the write-ahead log."""

from gateway.turn.journal.journal import Journal, Recovery, restore_sessions
from gateway.turn.journal.records import Outcome, Received
from gateway.turn.journal.state import JournalState

__all__ = ["Journal", "JournalState", "Outcome", "Received", "Recovery", "restore_sessions"]
