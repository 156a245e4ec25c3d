"""python-telegram-bot's exceptions, translated into the errors the channel manager acts on.

Telegram says what went wrong in the `description` of a non-2xx answer; python-telegram-bot
turns the status into an exception class (400 BadRequest, 401/404 InvalidToken, 403 Forbidden,
409 Conflict, 429 RetryAfter, the rest NetworkError) and keeps the description as its message.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    RetryAfter,
    TelegramError,
)
from telegram.warnings import PTBDeprecationWarning

from channels.errors import (
    AuthError,
    ChannelError,
    FormattingRejected,
    MessageNotModified,
    MessageTooLong,
    RateLimited,
    TransientError,
)

CHANNEL = "telegram"

_FORMATTING_MARKERS = ("can't parse entities", "can't find end of", "unsupported start tag")
_TOO_LONG_MARKERS = ("message is too long", "text is too long", "caption is too long")


def retry_after_s(exc: RetryAfter) -> float:
    """The server's wait in seconds, without PTB's int-vs-timedelta deprecation warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def translate(exc: TelegramError, action: str) -> ChannelError:
    """The channel error for a failed Bot API call; `action` names the call for the log."""
    text = f"{action}: {exc.message}"
    if isinstance(exc, RetryAfter):
        return RateLimited(retry_after_s(exc), text, channel=CHANNEL)
    if isinstance(exc, InvalidToken):
        return AuthError(text, channel=CHANNEL, suggestion="check the bot token from @BotFather")
    if isinstance(exc, Forbidden):
        return AuthError(
            text,
            channel=CHANNEL,
            suggestion="the bot was blocked, removed from the chat or lacks the right",
        )
    if isinstance(exc, BadRequest):
        return _bad_request(exc, text)
    if isinstance(exc, ChatMigrated):
        return ChannelError(
            text,
            channel=CHANNEL,
            suggestion=f"the group is now the supergroup {exc.new_chat_id}; talk to it there",
        )
    if isinstance(exc, Conflict):
        return TransientError(
            text,
            channel=CHANNEL,
            suggestion="another process polls with this token, or a webhook is set",
        )
    # NetworkError covers timeouts, 5xx and broken connections; a bare TelegramError is an
    # unreadable answer (a proxy's error page): both are worth another try.
    return TransientError(text, channel=CHANNEL)


def _bad_request(exc: BadRequest, text: str) -> ChannelError:
    description = exc.message.casefold()
    if any(marker in description for marker in _FORMATTING_MARKERS):
        return FormattingRejected(text, channel=CHANNEL)
    if "message is not modified" in description:
        return MessageNotModified(text, channel=CHANNEL)
    if any(marker in description for marker in _TOO_LONG_MARKERS):
        return MessageTooLong(text, channel=CHANNEL)
    return ChannelError(text, channel=CHANNEL)


@contextmanager
def translated(action: str) -> Iterator[None]:
    """Raise the channel error for any Telegram error inside the block."""
    try:
        yield
    except TelegramError as exc:
        raise translate(exc, action) from exc


def is_fatal_at_start(exc: TelegramError) -> bool:
    """A token Telegram rejects, or a bot it has banned: restarting cannot help."""
    return isinstance(exc, InvalidToken | Forbidden)


def rejected_token(exc: TelegramError, kind: type[ChannelError]) -> ChannelError | None:
    """A `kind` error saying Telegram rejected the bot token, when `exc` means that; else None.

    It names only the exception's type: PTB's message quotes the token, which must reach
    neither the logs nor a command's output.
    """
    if not is_fatal_at_start(exc):
        return None
    return kind(
        f"Telegram rejected the bot token ({type(exc).__name__})",
        channel=CHANNEL,
        suggestion="check the token from @BotFather in this profile's config",
    )
