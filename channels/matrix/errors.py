"""matrix-nio's failures in the words the channel manager's retry policy acts on.

nio returns an `ErrorResponse` (it raises nothing for an HTTP error) with the homeserver's
`errcode`, `error` and, for `429 M_LIMIT_EXCEEDED`, `retry_after_ms`. The client is built with
`max_limit_exceeded=0` and `max_timeouts=0`, so nio itself never sleeps or retries: the
manager's retry policy is the one layer, and a rate-limited message waits the server's figure.
"""

from __future__ import annotations

from nio import ErrorResponse

from channels.errors import AuthError, ChannelError, MessageTooLong, RateLimited, TransientError
from channels.retry import DEFAULT_RETRY_AFTER_S, platform_calls

CHANNEL = "matrix"

AUTH_ERRCODES = frozenset({"M_UNKNOWN_TOKEN", "M_MISSING_TOKEN", "M_USER_DEACTIVATED"})


class MatrixApiError(ChannelError):
    """A refusal re-sending cannot fix; `errcode` is the homeserver's."""

    def __init__(self, message: str, *, status: int, errcode: str) -> None:
        super().__init__(message, channel=CHANNEL)
        self.status = status
        self.errcode = errcode


def http_status(response: ErrorResponse) -> int:
    transport = response.transport_response
    status = getattr(transport, "status", 0)
    return status if isinstance(status, int) else 0


def translate(response: ErrorResponse, what: str) -> ChannelError:
    status = http_status(response)
    errcode = response.status_code or ""
    text = f"{what}: HTTP {status}, {errcode or 'no errcode'}: {response.message}"
    if status == 429 or errcode == "M_LIMIT_EXCEEDED":
        retry_after_ms = response.retry_after_ms
        retry_after_s = retry_after_ms / 1000 if retry_after_ms else DEFAULT_RETRY_AFTER_S
        return RateLimited(retry_after_s, text, channel=CHANNEL)
    if errcode in AUTH_ERRCODES or status == 401:
        return AuthError(
            text,
            channel=CHANNEL,
            suggestion="check access_token (and that it belongs to user_id on this homeserver)",
        )
    if errcode == "M_TOO_LARGE" or status == 413:
        return MessageTooLong(text, channel=CHANNEL)
    if status >= 500 or status == 0:
        return TransientError(text, channel=CHANNEL, suggestion="the homeserver is having trouble")
    return MatrixApiError(text, status=status, errcode=errcode)


#: nio calls with a deadline; network failures become `TransientError`.
matrix_call = platform_calls(channel=CHANNEL)
