"""The statements the PostgreSQL store and the migration from files share."""

from __future__ import annotations

import hashlib
from typing import Final

APPEND: Final = (
    "SELECT octos_append($1, $2, $3, $4, $5, $6::json, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
)
LIVE_ROW: Final = """
SELECT id, schema_version, meta::text AS meta, updated_at, message_count
FROM octos_sessions WHERE scope = $1 AND session_key = $2 AND archived_at IS NULL
"""
#: The live row and its messages in order, in one statement: one snapshot, one round trip.
LIVE_SESSION: Final = """
SELECT s.schema_version, s.meta::text AS meta, s.updated_at,
       ARRAY(SELECT m.message::text FROM octos_messages m WHERE m.session_id = s.id
             ORDER BY m.seq) AS messages
FROM octos_sessions s WHERE s.scope = $1 AND s.session_key = $2 AND s.archived_at IS NULL
"""
UPSERT_ROW: Final = """
INSERT INTO octos_sessions (scope, session_key, base_key, topic, schema_version, meta, title,
                            parent_key, created_at, updated_at, bytes)
VALUES ($1, $2, $3, $4, $5, $6::json, $7, $8, $9, $10, $11)
ON CONFLICT (scope, session_key) WHERE archived_at IS NULL
DO UPDATE SET updated_at = EXCLUDED.updated_at
RETURNING id, next_seq, schema_version
"""
INSERT_MESSAGES: Final = """
INSERT INTO octos_messages (session_id, seq, fingerprint, message)
SELECT $1, $2 + item.ord - 1, item.fingerprint, item.message::json
FROM unnest($3::bytea[], $4::text[]) WITH ORDINALITY AS item(fingerprint, message, ord)
ON CONFLICT (session_id, fingerprint) DO NOTHING
RETURNING seq
"""
COUNT_APPENDED: Final = """
UPDATE octos_sessions SET next_seq = next_seq + $2, message_count = message_count + $3,
    bytes = bytes + $4 WHERE id = $1
"""
LIST: Final = """
SELECT session_key, topic, message_count, bytes, updated_at, title, parent_key, schema_version, id
FROM octos_sessions WHERE scope = $1 AND archived_at IS NULL AND ($2::text IS NULL OR base_key = $2)
ORDER BY base_key, session_key
"""


def fingerprint(encoded: str) -> bytes:
    return hashlib.sha256(encoded.encode()).digest()


def line_bytes(encoded: str) -> int:
    return len(encoded.encode()) + 1  # as a JSONL line, so `size` reads like the file's
