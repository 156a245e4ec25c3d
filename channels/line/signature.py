"""LINE's webhook signature: `X-Line-Signature` = base64(HMAC-SHA256(channel secret, raw body)).

Checked on the raw bytes, in constant time, before anything reads the body as JSON.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

SIGNATURE_HEADER = "X-Line-Signature"


def signature_of(channel_secret: str, body: bytes) -> str:
    digest = hmac.new(channel_secret.encode("utf-8"), body, hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def signature_valid(channel_secret: str, body: bytes, offered: str | None) -> bool:
    if not offered:
        return False
    expected = signature_of(channel_secret, body).encode("ascii")
    return hmac.compare_digest(expected, offered.encode("utf-8", "replace"))
