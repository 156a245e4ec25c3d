"""discord.py's exceptions in the words the channel manager's retry policy acts on.

What discord.py already does on its own, so the manager does not do it twice:
- a 429 that carries a `Via` header (a genuine Discord rate limit) is waited out inside
  `HTTPClient.request` and the request re-sent, up to `max_ratelimit_timeout`; a longer wait
  raises `discord.RateLimited` instead, which becomes our `RateLimited`. A 429 without `Via`
  (Cloudflare, or a proxy) is raised at once as an `HTTPException` with status 429.
- 500, 502, 504 and 524 are tried up to five times in all (sleeping 1, 3, 5, 7 and 9 s after
  each) before they surface as `DiscordServerError`; other 5xx surface at once. Both become
  `TransientError`.
"""

from __future__ import annotations

import aiohttp
import discord

from channels.errors import (
    AuthError,
    ChannelError,
    FatalChannelError,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.retry import DEFAULT_RETRY_AFTER_S, parse_retry_after, platform_calls, retry_after_s
from channels.web.webhook import UnreadableJson, json_payload

CHANNEL = "discord"

#: Discord's "Invalid Form Body": the JSON error code of a field that failed validation.
INVALID_FORM_BODY = 50035
#: Gateway close codes after which reconnecting cannot help (bad token, bad intents, ...).
FATAL_CLOSE_CODES = frozenset({4004, 4010, 4011, 4012, 4013, 4014})


def translate_http_error(error: discord.HTTPException) -> ChannelError:
    """The typed error the manager acts on, for one failed REST call."""
    status = error.status
    detail = f"HTTP {status} (code {error.code}): {error.text}".strip()
    if status == 429:
        return RateLimited(
            _retry_after_s(error), detail, account_wide=_is_global(error), channel=CHANNEL
        )
    if status >= 500:
        return TransientError(detail, channel=CHANNEL, suggestion="Discord is having trouble")
    if status == 401:
        return AuthError(detail, channel=CHANNEL, suggestion="check the bot token")
    if status == 403:
        return AuthError(
            detail, channel=CHANNEL, suggestion="give the bot permission to post in this channel"
        )
    if status == 400 and error.code == INVALID_FORM_BODY and _is_length_error(error.text):
        return MessageTooLong(detail, channel=CHANNEL)
    return ChannelError(detail, channel=CHANNEL)


def translate_gateway_error(error: discord.ClientException) -> ChannelError:
    """The error `start()` raises when the gateway connection ends for good."""
    if isinstance(error, discord.LoginFailure):
        return FatalChannelError(
            "Discord refused the bot token", channel=CHANNEL, suggestion="check the bot token"
        )
    if isinstance(error, discord.PrivilegedIntentsRequired):
        return FatalChannelError(
            "Discord refused the message content intent",
            channel=CHANNEL,
            suggestion="enable MESSAGE CONTENT INTENT for the bot in the Discord developer portal",
        )
    if isinstance(error, discord.ConnectionClosed) and error.code in FATAL_CLOSE_CODES:
        return FatalChannelError(
            f"the Discord gateway closed the connection with code {error.code}",
            channel=CHANNEL,
            suggestion="check the bot token and its intents",
        )
    return TransientError(f"the Discord gateway connection ended: {error}", channel=CHANNEL)


def _translate(error: Exception, what: str) -> ChannelError:
    if isinstance(error, discord.RateLimited):
        return RateLimited(error.retry_after, f"{what}: {error}", channel=CHANNEL)
    if isinstance(error, discord.HTTPException):
        return translate_http_error(error)
    return ChannelError(f"{what}: {error}", channel=CHANNEL)


#: One REST call with a deadline, raising only `channels.errors` types.
discord_call = platform_calls(
    channel=CHANNEL,
    sdk_errors=(discord.RateLimited, discord.HTTPException),
    translate=_translate,
)


def _retry_after_s(error: discord.HTTPException) -> float:
    header = error.response.headers.get("Retry-After") if error.response is not None else None
    seconds = parse_retry_after(header)
    if seconds is not None:
        return seconds
    # Absent or malformed: the body's `retry_after` says the same thing.
    try:
        body = json_payload(error.text)
    except UnreadableJson:
        return DEFAULT_RETRY_AFTER_S
    return retry_after_s(body.get("retry_after") if isinstance(body, dict) else None)


def _is_global(error: discord.HTTPException) -> bool:
    """Discord marks its global limit with `X-RateLimit-Global` (or `global` in the body)."""
    headers = error.response.headers if error.response is not None else {}
    if str(headers.get("X-RateLimit-Global", "")).lower() == "true":
        return True
    try:
        body = json_payload(error.text)
    except UnreadableJson:
        return False
    return isinstance(body, dict) and body.get("global") is True


def _is_length_error(text: str) -> bool:
    lowered = text.casefold()
    return "length" in lowered or "base_type_max_length" in lowered


def gateway_failure(error: BaseException) -> ChannelError | None:
    """The channel error for a failed gateway run, or None to let the error through as is."""
    if isinstance(error, discord.HTTPException):
        return translate_http_error(error)
    if isinstance(error, discord.ClientException):
        return translate_gateway_error(error)
    if isinstance(error, aiohttp.ClientError | OSError | TimeoutError):
        return TransientError(f"cannot reach Discord: {error!r}", channel=CHANNEL)
    return None
