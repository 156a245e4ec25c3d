"""GatewayError: every error says its kind, its context and what to do."""

from __future__ import annotations

import copy
import pickle

import pytest

from bus import ErrorKind, GatewayError, InvalidStateTransition, UnsupportedSchemaVersion
from bus.errors import MAX_BODY_BYTES


def test_api_key_not_set_names_the_variable() -> None:
    error = GatewayError.api_key_not_set("openai", "OPENAI_API_KEY")
    assert error.kind is ErrorKind.API_KEY_NOT_SET
    assert error.suggestion is not None
    assert "OPENAI_API_KEY" in error.suggestion
    assert "OPENAI_API_KEY" in str(error)


@pytest.mark.parametrize(
    ("status", "kind", "advice"),
    [
        (401, ErrorKind.API, "API key"),
        (403, ErrorKind.API, "API key"),
        (404, ErrorKind.API, "base URL"),
        (429, ErrorKind.RATE_LIMITED, "slow down"),
        (500, ErrorKind.API, "retry later"),
        (504, ErrorKind.API, "retry"),
    ],
)
def test_api_error_advice_depends_on_the_status(status: int, kind: ErrorKind, advice: str) -> None:
    error = GatewayError.api_error("anthropic", status, '{"error": "nope"}')
    assert error.kind is kind
    assert error.status == status
    assert error.suggestion is not None
    assert advice in error.suggestion
    assert f"HTTP {status}" in str(error)
    assert '{"error": "nope"}' in str(error)


def test_api_error_without_advice_for_other_statuses() -> None:
    error = GatewayError.api_error("openai", 418, "")
    assert error.suggestion is None
    assert str(error) == "api: openai returned HTTP 418"


def test_api_error_body_is_truncated_on_a_character_boundary() -> None:
    body = "错" * 1000  # 3 bytes each: the budget falls inside a character
    error = GatewayError.api_error("openai", 500, body)
    shown = error.message.split(": ", 1)[1]
    assert shown.endswith(" …")
    kept = shown.removesuffix(" …")
    assert set(kept) == {"错"}
    assert len(kept.encode()) == MAX_BODY_BYTES // 3 * 3


def test_str_shows_kind_context_and_suggestion() -> None:
    error = GatewayError.timeout("chat completion", 30).with_context("profile work, chat 42")
    assert str(error) == (
        "timeout: chat completion timed out after 30 s\n"
        "  context: profile work, chat 42\n"
        "  suggestion: Retry; if it keeps happening, raise the timeout or check the network"
    )


def test_with_context_and_suggestion_return_copies() -> None:
    error = GatewayError.session("cannot open session file")
    changed = error.with_context("opening telegram:1").with_suggestion("check the disk")
    assert error.context is None
    assert error.suggestion is None
    assert (changed.context, changed.suggestion) == ("opening telegram:1", "check the disk")
    assert changed.kind is ErrorKind.SESSION


def test_rate_limited_carries_the_wait() -> None:
    error = GatewayError.rate_limited("telegram", retry_after_s=2.5)
    assert error.kind is ErrorKind.RATE_LIMITED
    assert error.retry_after_s == 2.5
    assert error.suggestion is not None
    assert "2.5 s" in error.suggestion


@pytest.mark.parametrize(
    ("error", "kind", "text"),
    [
        (GatewayError.config("bad port"), ErrorKind.CONFIG, "config: bad port"),
        (
            GatewayError.unknown_provider("gpt", ["openai", "echo"]),
            ErrorKind.CONFIG,
            "echo, openai",
        ),
        (GatewayError.channel("slack", "socket closed"), ErrorKind.CHANNEL, "slack: socket closed"),
        (GatewayError.serialization("bad JSON"), ErrorKind.SERIALIZATION, "bad JSON"),
        (GatewayError.task_not_found("t-1"), ErrorKind.NOT_FOUND, "task 't-1' not found"),
        (GatewayError.agent_not_found("a"), ErrorKind.NOT_FOUND, "agent 'a' not found"),
        (GatewayError.internal("lost a lane"), ErrorKind.INTERNAL, "report it"),
    ],
)
def test_constructors(error: GatewayError, kind: ErrorKind, text: str) -> None:
    assert error.kind is kind
    assert text in str(error)


def test_errors_are_exceptions_that_can_be_raised_and_caught_by_kind() -> None:
    with pytest.raises(GatewayError) as caught:
        raise GatewayError.not_found("profile", "work")
    assert caught.value.kind is ErrorKind.NOT_FOUND


@pytest.mark.parametrize(
    "error",
    [
        GatewayError.api_error("openai", 429, "slow").with_context("turn 3"),
        InvalidStateTransition("pending", "completed", ("in_progress",)),
        UnsupportedSchemaVersion("SessionSummary", 4, 1),
    ],
)
def test_errors_survive_pickle_and_copy(error: GatewayError) -> None:
    for clone in (pickle.loads(pickle.dumps(error)), copy.deepcopy(error)):
        assert type(clone) is type(error)
        assert clone.__dict__ == error.__dict__
        assert str(clone) == str(error)
