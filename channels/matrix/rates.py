"""Matrix's send rates: each homeserver sets its own (Synapse's `rc_message`), and the
client-server API publishes none, so the scheduler paces by the homeserver's refusals alone:
a 429 `M_LIMIT_EXCEEDED` holds the room for its `retry_after_ms`
(https://spec.matrix.org/latest/client-server-api/#rate-limiting).
"""

from __future__ import annotations

from channels.pacing import RateLimits

RATE_LIMITS = RateLimits()
