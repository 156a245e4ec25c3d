"""Graph API failures in the words the channel manager's retry policy acts on.

The Cloud API answers a failed call with a 4xx/5xx status and
`{"error": {"message", "type", "code", "error_subcode", "error_data": {"details"},
"fbtrace_id"}}`; the `code` says what happened, the HTTP status (usually 400) hardly does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from channels.errors import AuthError, ChannelError, DeliveryError, RateLimited, TransientError

CHANNEL = "whatsapp"

#: Cloud API throughput reached (about 80 messages a second per number).
THROUGHPUT = 130429
#: Too many messages to one recipient in a short time (about one every 6 s).
PAIR_RATE = 131056
#: The user last wrote over 24 hours ago: only a template message may be sent now.
OUTSIDE_WINDOW = 131047
#: The access token expired or was revoked.
TOKEN = 190
#: Graph API application or account rate limits.
APP_RATE_LIMITS = frozenset({4, 17, 32, 613, 80007})
#: WhatsApp's own trouble: worth another try.
SERVICE_ERRORS = frozenset({1, 2, 131000, 131016})

#: The metric reason of a reply given up on because the 24-hour window is closed.
OUTSIDE_WINDOW_REASON = "outside_window"

_WAIT_S = {THROUGHPUT: 1.0, PAIR_RATE: 6.0}
_APP_RATE_WAIT_S = 60.0


class TokenRejected(AuthError):
    """Error 190: the access token is no longer valid; the channel is Down until replaced."""


def graph_error(status: int, body: object, what: str) -> ChannelError:
    """The typed error for one failed Graph call (`body` is the decoded JSON, if any)."""
    error: Mapping[str, Any] = {}
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        error = body["error"]
    code = error.get("code") if isinstance(error.get("code"), int) else None
    message = str(error.get("message", ""))[:300]
    details = error.get("error_data", {})
    if isinstance(details, Mapping) and details.get("details"):
        message += f" ({str(details['details'])[:300]})"
    detail = f"{what}: HTTP {status}" + (f", error {code}" if code is not None else "")
    if message:
        detail += f": {message}"
    if code in _WAIT_S:
        # The pair rate is one user's; throughput is the whole number's.
        return RateLimited(_WAIT_S[code], detail, account_wide=code == THROUGHPUT, channel=CHANNEL)
    if code in APP_RATE_LIMITS or status == 429:
        return RateLimited(_APP_RATE_WAIT_S, detail, account_wide=True, channel=CHANNEL)
    if code == OUTSIDE_WINDOW:
        # Not retried: only a template message can reopen the conversation.
        return DeliveryError(detail, reason=OUTSIDE_WINDOW_REASON, channel=CHANNEL, attempts=1)
    if code == TOKEN or status == 401:
        return TokenRejected(
            detail, channel=CHANNEL, suggestion="replace access_token with a valid one"
        )
    if status >= 500 or code in SERVICE_ERRORS:
        return TransientError(detail, channel=CHANNEL, suggestion="WhatsApp is having trouble")
    return ChannelError(detail, channel=CHANNEL)
