"""slack_sdk's failures in the words the channel manager's retry policy acts on.

Slack answers most failures with HTTP 200 and `{"ok": false, "error": "<code>"}`; a rate limit
is HTTP 429 with a `Retry-After` header (seconds). slack_sdk raises `SlackApiError` for both.

The web client this channel builds has no retry handlers of its own (slack_sdk retries
connection errors by default, and offers a 429 handler): the manager's retry policy is the one
layer that retries, so a rate-limited message waits `Retry-After` once and is delivered once.
"""

from __future__ import annotations

from slack_sdk.errors import SlackApiError, SlackClientError

from channels.errors import (
    AuthError,
    ChannelError,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.retry import answers_of, platform_calls, retry_after_s

CHANNEL = "slack"

#: Credentials that are wrong, revoked or of the wrong kind: trying again cannot help.
AUTH_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "token_expired",
        "account_inactive",
        "not_allowed_token_type",
        "missing_scope",
        "team_access_not_granted",
        "no_permission",
    }
)
#: Slack's own trouble, worth another try after a pause.
SERVER_ERRORS = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)

_SUGGESTIONS = {
    "invalid_auth": "check bot_token (xoxb-...) and app_token (xapp-...)",
    "not_authed": "set bot_token (xoxb-...) and, in socket mode, app_token (xapp-...)",
    "token_revoked": "the app was uninstalled or its token revoked; reinstall it",
    "account_inactive": "the bot user was deactivated; reinstall the app",
    "not_allowed_token_type": "socket mode needs an app-level token (xapp-...) as app_token",
    "missing_scope": "add the missing OAuth scope to the app and reinstall it",
    "msg_too_long": "the text is over Slack's limit",
    "channel_not_found": "invite the bot to the channel, or check the channel id",
    "not_in_channel": "invite the bot to the channel",
}


def error_code(error: SlackApiError) -> str:
    """Slack's `error` field; empty when the body was not Slack's JSON (a proxy's 502 page)."""
    data = getattr(error.response, "data", None)
    code = data.get("error") if isinstance(data, dict) else None
    return code if isinstance(code, str) else ""


def translate_api_error(error: SlackApiError, what: str) -> ChannelError:
    """The typed error the manager acts on, for one failed Web API call."""
    response = error.response
    status = getattr(response, "status_code", 200)
    code = error_code(error)
    detail = f"{what}: HTTP {status}" + (f", error {code!r}" if code else "")
    suggestion = _SUGGESTIONS.get(code, "")
    if status == 429 or code == "ratelimited":
        return RateLimited(_retry_after_s(error), detail, channel=CHANNEL)
    if code == "msg_too_long":
        return MessageTooLong(detail, channel=CHANNEL, suggestion=suggestion)
    if code in AUTH_ERRORS or status in (401, 403):
        return AuthError(detail, channel=CHANNEL, suggestion=suggestion)
    if status >= 500 or code in SERVER_ERRORS:
        return TransientError(detail, channel=CHANNEL, suggestion="Slack is having trouble")
    # message_not_found, cant_update_message, channel_not_found, ...: a plain refusal.
    return ChannelError(detail, channel=CHANNEL, suggestion=suggestion)


def _retry_after_s(error: SlackApiError) -> float:
    headers = getattr(error.response, "headers", None) or {}
    return retry_after_s(headers.get("Retry-After") or headers.get("retry-after"))


#: Web API calls with a deadline, raising only `channels.errors` types.
slack_call = platform_calls(
    channel=CHANNEL,
    sdk_errors=(SlackClientError,),
    translate=answers_of(SlackApiError, translate_api_error, channel=CHANNEL),
)
