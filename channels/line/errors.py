"""line-bot-sdk's failures in the words the channel manager's retry policy acts on.

The SDK raises `ApiException` for any non-2xx answer, with the status, headers and body
(`{"message": ..., "details": [...]}`). A rate limit is HTTP 429 (LINE sends no Retry-After
that we know of; when it does, it is honoured); 401 is a bad or revoked channel access token.
"""

from __future__ import annotations

from linebot.v3.messaging.exceptions import ApiException, OpenApiException

from channels.errors import AuthError, ChannelError, MessageTooLong, RateLimited, TransientError
from channels.retry import answers_of, platform_calls, retry_after_s
from channels.web.webhook import UnreadableJson, json_payload

CHANNEL = "line"


class LineApiError(ChannelError):
    """A refusal re-sending cannot fix; `status` and `detail` are LINE's own."""

    def __init__(self, message: str, *, status: int, detail: str, suggestion: str = "") -> None:
        super().__init__(message, channel=CHANNEL, suggestion=suggestion)
        self.status = status
        self.detail = detail


def error_message(error: ApiException) -> str:
    """LINE's `message` (and details) from an error body; the raw text when it is not JSON."""
    body = error.body
    text = body.decode("utf-8", "replace") if isinstance(body, bytes | bytearray) else body or ""
    try:
        parsed = json_payload(text)
    except UnreadableJson:
        return text[:300]
    if not isinstance(parsed, dict):
        return text[:300]
    message = str(parsed.get("message", ""))
    details = parsed.get("details")
    if isinstance(details, list) and details:
        message += " (" + "; ".join(str(d.get("message", d)) for d in details[:3]) + ")"
    return message


def _retry_after_s(error: ApiException) -> float:
    headers = error.headers or {}
    return retry_after_s(headers.get("Retry-After") if hasattr(headers, "get") else None)


def translate(error: ApiException, what: str) -> ChannelError:
    status = int(error.status or 0)
    detail = error_message(error)
    text = f"{what}: HTTP {status}" + (f", {detail}" if detail else "")
    if status == 429:
        return RateLimited(_retry_after_s(error), text, channel=CHANNEL)
    if status in (401, 403):
        return AuthError(
            text,
            channel=CHANNEL,
            suggestion="check channel_access_token (a long-lived token from the Messaging API tab)",
        )
    if status >= 500 or status == 0:
        return TransientError(text, channel=CHANNEL, suggestion="LINE is having trouble")
    if status == 400 and "5000" in detail:
        return MessageTooLong(text, channel=CHANNEL)
    return LineApiError(text, status=status, detail=detail)


#: Messaging API calls with a deadline, raising only `channels.errors` types.
line_call = platform_calls(
    channel=CHANNEL,
    sdk_errors=(OpenApiException,),
    translate=answers_of(ApiException, translate, channel=CHANNEL),
)
