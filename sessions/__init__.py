"""Durable sessions: JSONL store, file layouts, key encoding, LRU manager, per-session actors."""

from sessions.actor import SessionActor, SessionActors
from sessions.compaction import is_compaction_summary
from sessions.errors import (
    EmptyRewriteRefused,
    InvalidTopicName,
    SessionActorsStopped,
    SessionError,
    SessionExists,
    SessionKeyCollision,
    SessionStoreClosed,
    SessionWriteError,
    UnsupportedSessionSchema,
    WorkItemCancelled,
)
from sessions.manager import SessionManager
from sessions.meta import CURRENT_SCHEMA_VERSION, SessionMeta
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
    "SessionActor",
    "SessionActors",
    "SessionActorsStopped",
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
    "WorkItemCancelled",
    "is_compaction_summary",
    "validate_topic_name",
]
