"""Errors a user can meet, each saying what went wrong, where, and what to do about it.

As in octos, an error has three layers: a `kind` (what callers branch on), a `context` (what
we were doing) and a `suggestion` (what the user should do). The kinds are few on purpose:
a caller decides on retrying, reporting or giving up, and more kinds than decisions only
scatter that logic. Details (an HTTP status, a wait) ride along as attributes.
"""

from __future__ import annotations

import copy
from enum import StrEnum
from typing import Any, Self, TypedDict, Unpack

from bus.text import truncated_utf8

#: How much of an API response body an error keeps: enough to read, never a page of JSON.
MAX_BODY_BYTES = 512


class ErrorKind(StrEnum):
    CONFIG = "config"
    API_KEY_NOT_SET = "api_key_not_set"
    API = "api"
    RATE_LIMITED = "rate_limited"
    TIMEOUT = "timeout"
    CHANNEL = "channel"
    SESSION = "session"
    SERIALIZATION = "serialization"
    INVALID_STATE_TRANSITION = "invalid_state_transition"
    NOT_FOUND = "not_found"
    INTERNAL = "internal"


def _restore(cls: type[GatewayError], state: dict[str, Any]) -> GatewayError:
    error = cls.__new__(cls)
    Exception.__init__(error, state.get("message", ""))
    error.__dict__.update(state)
    return error


class ErrorDetails(TypedDict, total=False):
    """The keywords every `GatewayError` takes, its subclasses' constructors passing them on."""

    #: What we were doing.
    context: str | None
    #: What the user should do.
    suggestion: str | None
    #: The HTTP status of an API error.
    status: int | None
    #: How long the far end asked us to wait, when it said.
    retry_after_s: float | None


class GatewayError(Exception):
    """An error with a kind, the context it happened in and a suggestion for the user."""

    def __init__(self, kind: ErrorKind, message: str, **details: Unpack[ErrorDetails]) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.context = details.get("context")
        self.suggestion = details.get("suggestion")
        self.status = details.get("status")
        self.retry_after_s = details.get("retry_after_s")

    def __str__(self) -> str:
        lines = [f"{self.kind.value}: {self.message}"]
        if self.context:
            lines.append(f"  context: {self.context}")
        if self.suggestion:
            lines.append(f"  suggestion: {self.suggestion}")
        return "\n".join(lines)

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses have their own constructor signatures; rebuild from the state instead,
        # so copies and pickles (process pools, NATS) keep every attribute.
        return (_restore, (type(self), self.__dict__.copy()))

    def with_context(self, context: str) -> Self:
        """A copy that says what we were doing when it happened."""
        changed = copy.copy(self)
        changed.context = context
        return changed

    def with_suggestion(self, suggestion: str) -> Self:
        changed = copy.copy(self)
        changed.suggestion = suggestion
        return changed

    # Named constructors: a caller says what happened, the kind and the suggestion follow
    # from the name.
    @classmethod
    def config(cls, message: str, *, suggestion: str | None = None) -> GatewayError:
        return cls(ErrorKind.CONFIG, message, suggestion=suggestion)

    @classmethod
    def api_key_not_set(cls, provider: str, env_var: str) -> GatewayError:
        return cls(
            ErrorKind.API_KEY_NOT_SET,
            f"no API key for {provider}",
            suggestion=f"Set the {env_var} environment variable or put the key in the profile",
        )

    @classmethod
    def unknown_provider(cls, name: str, known: list[str] | None = None) -> GatewayError:
        hint = f"Use one of: {', '.join(sorted(known))}" if known else None
        return cls(ErrorKind.CONFIG, f"unknown provider {name!r}", suggestion=hint)

    @classmethod
    def api_error(cls, provider: str, status: int, body: str) -> GatewayError:
        """An HTTP error from a provider; the body is cut to `MAX_BODY_BYTES`."""
        kind = ErrorKind.RATE_LIMITED if status == 429 else ErrorKind.API
        shown = truncated_utf8(body.strip(), MAX_BODY_BYTES, " …")
        message = f"{provider} returned HTTP {status}" + (f": {shown}" if shown else "")
        return cls(kind, message, suggestion=_api_suggestion(provider, status), status=status)

    @classmethod
    def rate_limited(cls, who: str, retry_after_s: float | None = None) -> GatewayError:
        wait = f"wait {retry_after_s:g} s" if retry_after_s is not None else "wait"
        return cls(
            ErrorKind.RATE_LIMITED,
            f"rate limited by {who}",
            suggestion=f"Slow down: {wait} before sending again",
            retry_after_s=retry_after_s,
        )

    @classmethod
    def timeout(cls, operation: str, timeout_s: float) -> GatewayError:
        return cls(
            ErrorKind.TIMEOUT,
            f"{operation} timed out after {timeout_s:g} s",
            suggestion="Retry; if it keeps happening, raise the timeout or check the network",
        )

    @classmethod
    def channel(cls, channel: str, message: str) -> GatewayError:
        return cls(ErrorKind.CHANNEL, f"{channel}: {message}")

    @classmethod
    def session(cls, message: str) -> GatewayError:
        return cls(ErrorKind.SESSION, message)

    @classmethod
    def serialization(cls, message: str) -> GatewayError:
        return cls(ErrorKind.SERIALIZATION, message)

    @classmethod
    def not_found(cls, what: str, name: str) -> GatewayError:
        return cls(ErrorKind.NOT_FOUND, f"{what} {name!r} not found")

    @classmethod
    def task_not_found(cls, task_id: object) -> GatewayError:
        return cls.not_found("task", str(task_id))

    @classmethod
    def agent_not_found(cls, agent_id: str) -> GatewayError:
        return cls.not_found("agent", agent_id)

    @classmethod
    def internal(cls, message: str) -> GatewayError:
        return cls(
            ErrorKind.INTERNAL,
            message,
            suggestion="This is a bug in octos-gateway; please report it with the log",
        )


def _api_suggestion(provider: str, status: int) -> str | None:
    if status == 401:
        return f"Check the {provider} API key: it was rejected"
    if status == 403:
        return f"Check that the {provider} API key may use this model or endpoint"
    if status == 404:
        return "Check the base URL and the model name"
    if status == 429:
        return f"Rate limited by {provider}: slow down, or wait and retry"
    if status == 504:
        return f"{provider} timed out: retry, perhaps with a shorter request"
    if status >= 500:
        return f"{provider} had a server error: retry later"
    return None


class InvalidStateTransition(GatewayError):
    """A task was asked to move along an edge its state diagram does not have."""

    def __init__(self, from_state: str, to_state: str, allowed: tuple[str, ...] = ()) -> None:
        if allowed:
            suggestion = f"From {from_state} a task can only move to: {', '.join(allowed)}"
        else:
            suggestion = f"A {from_state} task is finished; create a new task instead"
        super().__init__(
            ErrorKind.INVALID_STATE_TRANSITION,
            f"a task cannot move from {from_state} to {to_state}",
            suggestion=suggestion,
        )
        self.from_state = from_state
        self.to_state = to_state


class UnsupportedSchemaVersion(GatewayError):
    """A durable payload written by a newer build: refused rather than half read."""

    def __init__(self, payload: str, found: int, supported: int) -> None:
        super().__init__(
            ErrorKind.SERIALIZATION,
            f"{payload} has schema_version {found}; this build reads up to {supported}",
            suggestion="It was written by a newer octos-gateway: upgrade to read it",
        )
        self.payload = payload
        self.found = found
        self.supported = supported
