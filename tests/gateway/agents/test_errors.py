from __future__ import annotations

import pickle

import pytest

from bus.errors import ErrorKind, GatewayError
from gateway.agents.errors import (
    AgentError,
    AgentFailure,
    excerpt,
    failure_for_status,
    secret_fragments,
    url_for_log,
)


def test_agent_error_is_a_gateway_error_with_an_apology() -> None:
    error = AgentError(
        "HTTP 429: slow down",
        failure=AgentFailure.RATE_LIMITED,
        context="openai agent (model m at http://x)",
        status=429,
        retry_after_s=2.0,
    )
    assert isinstance(error, GatewayError)
    assert error.kind is ErrorKind.RATE_LIMITED
    assert error.user_message == (
        "Sorry, the assistant is not available right now (rate limited). "
        "Please try again in a moment."
    )
    text = str(error)
    assert "HTTP 429: slow down" in text
    assert "openai agent (model m at http://x)" in text
    assert "suggestion:" in text


def test_agent_error_survives_pickling() -> None:
    error = AgentError("boom", failure=AgentFailure.TIMEOUT, status=504)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, AgentError)
    assert copy.failure is AgentFailure.TIMEOUT
    assert copy.kind is ErrorKind.TIMEOUT
    assert copy.user_message == error.user_message
    assert copy.status == 504


def test_every_failure_has_an_apology_that_names_nothing_technical() -> None:
    for failure in AgentFailure:
        message = AgentError("detail", failure=failure).user_message
        assert message.startswith("Sorry")
        assert "http" not in message.lower()
        assert "detail" not in message


@pytest.mark.parametrize(
    ("status", "failure"),
    [
        (429, AgentFailure.RATE_LIMITED),
        (401, AgentFailure.AUTH),
        (403, AgentFailure.AUTH),
        (404, AgentFailure.MISCONFIGURED),
        (307, AgentFailure.MISCONFIGURED),
        (400, AgentFailure.REJECTED),
        (408, AgentFailure.TIMEOUT),
        (504, AgentFailure.TIMEOUT),
        (500, AgentFailure.UNAVAILABLE),
        (503, AgentFailure.UNAVAILABLE),
    ],
)
def test_failure_for_status(status: int, failure: AgentFailure) -> None:
    assert failure_for_status(status) is failure


def test_excerpt_masks_secrets_before_cutting() -> None:
    secret = "sk-" + "s" * 40
    body = "x" * 490 + secret + "y" * 100
    shown = excerpt(body, (secret,))
    assert secret not in shown
    assert "sss" not in shown
    assert shown.endswith("chars cut]")


def test_url_for_log_drops_credentials_query_and_fragment() -> None:
    shown = url_for_log("https://user:pass@hooks.example.com/agent?token=abc#frag")
    assert shown == "https://hooks.example.com/agent"


def test_secret_fragments_mask_values_and_bearer_tokens_but_not_short_words() -> None:
    fragments = secret_fragments(["Bearer abcdefgh12345", "yes", "x-api-key-value"])
    assert fragments == ("Bearer abcdefgh12345", "x-api-key-value", "abcdefgh12345")
    body = "auth Bearer abcdefgh12345 then abcdefgh12345 and yes"
    assert excerpt(body, fragments) == "auth *** then *** and yes"
