"""What can go wrong talking to a platform, in the words the retry policy acts on.

Channels translate their SDK's exceptions into these; the channel manager decides what to do
with them (wait, back off, re-send as plain text, give up) in one place for every platform.
"""

from __future__ import annotations


class ChannelError(Exception):
    """Base of every error a channel raises on purpose."""

    def __init__(self, message: str, *, channel: str = "", suggestion: str = "") -> None:
        super().__init__(message)
        self.channel = channel
        self.suggestion = suggestion

    def __str__(self) -> str:
        text = super().__str__()
        if self.channel:
            text = f"{self.channel}: {text}"
        return f"{text}; {self.suggestion}" if self.suggestion else text


class RateLimited(ChannelError):
    """The platform said slow down; `retry_after_s` is its own figure. `account_wide`: the
    platform says the limit is the whole account's (a global limit), not the chat's."""

    def __init__(
        self,
        retry_after_s: float,
        message: str = "rate limited",
        *,
        account_wide: bool = False,
        **kw: str,
    ) -> None:
        super().__init__(message, **kw)
        self.retry_after_s = max(0.0, retry_after_s)
        self.account_wide = account_wide


class TransientError(ChannelError):
    """A network error or a 5xx: worth trying again after a pause."""


class MessageTooLong(ChannelError):
    """The platform refused the length; re-sending the same text cannot help."""


class AuthError(ChannelError):
    """Bad or revoked credentials: retrying only gets the bot banned."""


class FormattingRejected(ChannelError):
    """The platform could not parse the markup (Telegram "can't parse entities")."""


class MessageNotModified(ChannelError):
    """An edit that changed nothing; counts as success."""


class FatalChannelError(ChannelError):
    """`start()` cannot succeed by trying again (bad token, missing permission)."""


class DeliveryError(ChannelError):
    """The manager gave up on a message; `reason` is a short label for metrics."""

    def __init__(self, message: str, *, reason: str, channel: str = "", attempts: int = 0) -> None:
        super().__init__(message, channel=channel)
        self.reason = reason
        self.attempts = attempts
