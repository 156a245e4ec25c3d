"""X-Hub-Signature-256: Meta's proof that a webhook request is its own.

`sha256=` + hex(HMAC-SHA256(app_secret, raw body)), checked on the raw bytes before anything is
parsed, compared with `hmac.compare_digest` in constant time. A missing header is a refusal.
"""

from __future__ import annotations

import hashlib
import hmac

from channels.web.webhook import Verdict

SIGNATURE_HEADER = "X-Hub-Signature-256"
_PREFIX = "sha256="


def sign(app_secret: str, body: bytes) -> str:
    return _PREFIX + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()


def check(app_secret: str, body: bytes, offered: str | None) -> Verdict:
    if not offered:
        return Verdict.MISSING
    if not hmac.compare_digest(sign(app_secret, body).encode(), offered.strip().encode()):
        return Verdict.WRONG
    return Verdict.VALID
