"""Idempotency keys for platforms that take one (Matrix txnId, LINE X-Line-Retry-Key).

A reply part must carry the same key when it is sent again after a crash, so the platform shows
it once. `OutboundMessage.delivery_id` is stable across re-deliveries; the part's own text is
too (the splitter is deterministic), so the key is derived from both: two parts of one reply get
different keys even where the gateway gives every part the same `delivery_id`. Without a
`delivery_id` there is nothing stable to derive from, and a fresh random key is used.
"""

from __future__ import annotations

import hashlib
import uuid

from bus import OutboundMessage

#: The namespace of the UUIDs derived here (a fixed, random UUID: the derivation never changes).
_NAMESPACE = uuid.UUID("5b0f3c8e-7a51-4f5c-9d7e-2f6a0c1b9e43")


def delivery_key(message: OutboundMessage) -> str:
    """A key that is the same for the same part of the same reply, and only for it."""
    if message.delivery_id is None:
        return uuid.uuid4().hex
    digest = hashlib.sha256(message.content.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{message.delivery_id}.{digest[:24]}"


def delivery_uuid(message: OutboundMessage) -> str:
    """`delivery_key` as a UUID in hexadecimal form, for platforms that require one."""
    if message.delivery_id is None:
        return str(uuid.uuid4())
    return str(uuid.uuid5(_NAMESPACE, delivery_key(message)))
