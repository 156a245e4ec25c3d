"""The twilio library's failures in the words the channel manager's retry policy acts on.

Twilio answers a failed REST call with an HTTP status and a JSON body carrying its own error
`code` (`{"code": 20429, "message", "more_info", "status": 429}`), which the library raises as
`TwilioRestException`. Rate limits (HTTP 429, code 20429) carry no `Retry-After` the library
passes on, so the wait is one second, then the retry policy's own backoff.
"""

from __future__ import annotations

from twilio.base.exceptions import TwilioException, TwilioRestException

from channels.errors import (
    AuthError,
    ChannelError,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.retry import DEFAULT_RETRY_AFTER_S, answers_of, platform_calls

CHANNEL = "twilio"

TOO_MANY_REQUESTS = 20429
AUTHENTICATE = 20003
BODY_TOO_LONG = 21617
UNSUBSCRIBED = 21610

_SUGGESTIONS = {
    AUTHENTICATE: "check account_sid and auth_token",
    BODY_TOO_LONG: "the text is over Twilio's 1,600 characters",
    UNSUBSCRIBED: "the recipient texted STOP; they must text START before the bot can answer",
    21211: "the 'To' number is not a valid phone number",
    21606: "from_number is not an SMS-capable Twilio number of this account",
}


def translate(error: TwilioRestException, what: str) -> ChannelError:
    code = error.code if isinstance(error.code, int) else None
    status = error.status
    detail = f"{what}: HTTP {status}" + (f", Twilio error {code}" if code else "")
    if error.msg:
        detail += f" ({error.msg})"
    suggestion = _SUGGESTIONS.get(code or 0, "")
    if status == 429 or code == TOO_MANY_REQUESTS:
        return RateLimited(DEFAULT_RETRY_AFTER_S, detail, channel=CHANNEL)
    if code == BODY_TOO_LONG:
        return MessageTooLong(detail, channel=CHANNEL, suggestion=suggestion)
    if status in (401, 403) or code == AUTHENTICATE:
        return AuthError(
            detail, channel=CHANNEL, suggestion=suggestion or _SUGGESTIONS[AUTHENTICATE]
        )
    if status >= 500:
        return TransientError(detail, channel=CHANNEL, suggestion="Twilio is having trouble")
    return ChannelError(detail, channel=CHANNEL, suggestion=suggestion)


#: REST calls with a deadline (the async client ignores its own timeout), raising only
#: `channels.errors` types.
twilio_call = platform_calls(
    channel=CHANNEL,
    sdk_errors=(TwilioException,),
    translate=answers_of(TwilioRestException, translate, channel=CHANNEL),
)
