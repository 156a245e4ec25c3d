"""Replies as interactive cards: one Markdown element, `update_multi` so the card can be
updated in place (a streamed reply) for everyone in the chat."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

#: Feishu keeps a message `uuid` for an hour and sends the same uuid only once (at most 50).
UUID_CHARS = 50


def card(text: str) -> dict[str, Any]:
    return {
        "config": {"wide_screen_mode": True, "update_multi": True},
        "elements": [{"tag": "markdown", "content": text}],
    }


def card_content(text: str) -> str:
    """The card as the stringified JSON Feishu's `content` field takes (UTF-8 kept as is, so a
    CJK character costs its 3 bytes, not a 6-byte escape)."""
    return json.dumps(card(text), ensure_ascii=False, separators=(",", ":"))


def request_uuid(delivery_id: str | None, content: str) -> str:
    """Idempotency key of one message: stable across resends of the same delivery (each chunk
    of a reply has its own), fresh when the gateway gave no delivery id."""
    if delivery_id is None:
        return uuid.uuid4().hex
    digest = hashlib.sha256(f"{delivery_id}\0{content}".encode()).hexdigest()
    return digest[:UUID_CHARS]
