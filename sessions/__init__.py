"""Durable sessions: JSONL store, file layouts, key encoding, LRU manager, topics; and the
write-ahead log (`sessions.wal`) the turn pipeline records everything in first."""

from sessions.errors import (
    EmptyRewriteRefused,
    InvalidTopicName,
    SessionError,
    SessionExists,
    SessionKeyCollision,
    SessionStoreClosed,
    SessionWriteError,
    UnsupportedSessionSchema,
)
from sessions.manager import SessionManager
from sessions.meta import CURRENT_SCHEMA_VERSION, SessionMeta
from sessions.operations import is_compaction_summary
from sessions.session import Session, SessionInfo
from sessions.store import AppendReceipt, SessionStore
from sessions.topics import ActiveTopics, validate_topic_name
from sessions.writer import FsyncPolicy

__all__ = [
    "CURRENT_SCHEMA_VERSION",
    "ActiveTopics",
    "AppendReceipt",
    "EmptyRewriteRefused",
    "FsyncPolicy",
    "InvalidTopicName",
    "Session",
    "SessionError",
    "SessionExists",
    "SessionInfo",
    "SessionKeyCollision",
    "SessionManager",
    "SessionMeta",
    "SessionStore",
    "SessionStoreClosed",
    "SessionWriteError",
    "UnsupportedSessionSchema",
    "is_compaction_summary",
    "validate_topic_name",
]
