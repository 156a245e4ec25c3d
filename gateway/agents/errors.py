"""Why an agent could not answer, in two voices: a short apology for the chat, detail for the log.

The apology (`user_message`) names no URL, key or status code; it only tells the person in the
chat whether trying again soon can help. `str(error)` is for the operator: what failed, the HTTP
status, the start of the response body, and what to do about it. Neither ever holds an API key.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Unpack

from yarl import URL

from bus.errors import ErrorDetails, ErrorKind, GatewayError

#: How much of an error response body goes into the log line.
BODY_EXCERPT_CHARS = 500


class AgentFailure(StrEnum):
    """What went wrong, finely enough to choose the apology and the operator's next step."""

    RATE_LIMITED = "rate_limited"
    AUTH = "auth"
    MISCONFIGURED = "misconfigured"
    REJECTED = "rejected"
    UNAVAILABLE = "unavailable"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    BAD_REPLY = "bad_reply"


_NOT_SET_UP = (
    "Sorry, the assistant is not available right now (it is not set up correctly). "
    "Please let the bot's owner know."
)

_USER_MESSAGES: dict[AgentFailure, str] = {
    AgentFailure.RATE_LIMITED: (
        "Sorry, the assistant is not available right now (rate limited). "
        "Please try again in a moment."
    ),
    AgentFailure.AUTH: _NOT_SET_UP,
    AgentFailure.MISCONFIGURED: _NOT_SET_UP,
    AgentFailure.REJECTED: (
        "Sorry, the assistant could not handle this message. "
        "Try rephrasing it, or start a new conversation with /new."
    ),
    AgentFailure.UNAVAILABLE: (
        "Sorry, the assistant is not available right now. Please try again later."
    ),
    AgentFailure.TIMEOUT: "Sorry, the assistant took too long to answer. Please try again.",
    AgentFailure.INTERRUPTED: "Sorry, the assistant's reply was cut off. Please try again.",
    AgentFailure.BAD_REPLY: (
        "Sorry, the assistant sent a reply that could not be read. Please try again later."
    ),
}

_SUGGESTIONS: dict[AgentFailure, str] = {
    AgentFailure.RATE_LIMITED: "Slow down, or raise the provider's rate limit or quota",
    AgentFailure.AUTH: "Check the agent's API key (or the webhook's credentials): it was refused",
    AgentFailure.MISCONFIGURED: "Check the agent's base_url/url and model in the profile",
    AgentFailure.REJECTED: "The server refused the request; its answer above says why",
    AgentFailure.UNAVAILABLE: "The server failed or could not be reached: retry later",
    AgentFailure.TIMEOUT: "Retry; if it keeps happening, raise the agent's timeout_s",
    AgentFailure.INTERRUPTED: "The connection broke in the middle of the reply: retry",
    AgentFailure.BAD_REPLY: "The server's reply did not have the documented format",
}

_ERROR_KINDS: dict[AgentFailure, ErrorKind] = {
    AgentFailure.RATE_LIMITED: ErrorKind.RATE_LIMITED,
    AgentFailure.MISCONFIGURED: ErrorKind.CONFIG,
    AgentFailure.TIMEOUT: ErrorKind.TIMEOUT,
}


class AgentError(GatewayError):
    """An agent failed to produce a reply.

    Besides the `GatewayError` layers (`kind`, `context`, `suggestion`, `status`,
    `retry_after_s`) it carries `failure` (the precise reason, for metrics) and `user_message`
    (safe to send to the chat).
    """

    def __init__(
        self,
        message: str,
        *,
        failure: AgentFailure,
        user_message: str | None = None,
        **details: Unpack[ErrorDetails],
    ) -> None:
        if details.get("suggestion") is None:
            details["suggestion"] = _SUGGESTIONS[failure]
        super().__init__(_ERROR_KINDS.get(failure, ErrorKind.API), message, **details)
        self.failure = failure
        self.user_message = user_message or _USER_MESSAGES[failure]


class AgentErrors:
    """One agent's errors: each names the agent (`context`), and detail quoted from its server
    has the agent's secrets masked (`mask`)."""

    def __init__(self, context: str, secrets: tuple[str, ...] = ()) -> None:
        self.context = context
        self._secrets = secrets

    def error(
        self, failure: AgentFailure, detail: str, **details: Unpack[ErrorDetails]
    ) -> AgentError:
        """An `AgentError` with this agent's context (over any `context` in `details`)."""
        return AgentError(detail, failure=failure, **(details | {"context": self.context}))

    def mask(self, text: str) -> str:
        """An excerpt of `text` for the log, the agent's secrets masked."""
        return excerpt(text, self._secrets)


def failure_for_status(status: int) -> AgentFailure:
    """What an HTTP error status from an agent endpoint means."""
    if status == 429:
        return AgentFailure.RATE_LIMITED
    if 300 <= status < 400:
        # An agent endpoint that redirects is almost always a wrong URL (http vs https, a path).
        return AgentFailure.MISCONFIGURED
    if status in (401, 403):
        return AgentFailure.AUTH
    if status in (404, 405):
        return AgentFailure.MISCONFIGURED
    if status in (408, 504):
        return AgentFailure.TIMEOUT
    if 400 <= status < 500:
        return AgentFailure.REJECTED
    return AgentFailure.UNAVAILABLE


def excerpt(body: str, secrets: tuple[str, ...] = ()) -> str:
    """The start of a response body for a log line, with any of `secrets` masked."""
    text = body.strip()
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    if len(text) > BODY_EXCERPT_CHARS:
        text = f"{text[:BODY_EXCERPT_CHARS]}... [{len(text) - BODY_EXCERPT_CHARS} chars cut]"
    return text


def url_for_log(url: str) -> str:
    """A URL without user info, query or fragment: any of them may carry a token."""
    try:
        return str(URL(url).with_user(None).with_query(None).with_fragment(None))
    except ValueError:
        return "<unparsable URL>"


#: Header values shorter than this are not masked in log text: masking "yes" or "1" everywhere
#: would garble the log and protect nothing.
MIN_MASKED_CHARS = 8


def secret_fragments(values: list[str]) -> tuple[str, ...]:
    """What to mask in log text for these credentials: each value, and the token of `Scheme
    token` values (`Bearer abc...`), longest first so a value is masked before its token."""
    fragments = {value for value in values if len(value) >= MIN_MASKED_CHARS}
    fragments |= {
        token for value in values if len(token := value.rpartition(" ")[2]) >= MIN_MASKED_CHARS
    }
    return tuple(sorted(fragments, key=len, reverse=True))
