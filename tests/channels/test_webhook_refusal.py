"""Webhook requests turned away before the gateway sees them: statuses, reasons, logs."""

from __future__ import annotations

from aiohttp.test_utils import make_mocked_request
from structlog.testing import capture_logs

from channels.web.webhook import (
    Verdict,
    WebhookRefused,
    is_stale,
    refusal_response,
    signature_refusal,
)


def test_a_timestamp_outside_the_window_or_not_a_number_is_stale() -> None:
    assert not is_stale("1000", 1000.0)
    assert not is_stale("1000", 1300.0)
    assert is_stale("1000", 1300.5)
    assert is_stale("1301", 1000.0)
    assert is_stale("1000", 1010.0, max_skew_s=5.0)
    assert is_stale("", 1000.0)
    assert is_stale("-5", 1000.0)
    # Digits to `str.isdigit` that `int` refuses: refused as stale, not a crash of the handler.
    assert is_stale("²", 1000.0)
    assert is_stale("1000²", 1000.0)


def test_a_refusal_is_answered_with_its_status_and_reason_and_logged() -> None:
    request = make_mocked_request("POST", "/feishu/events")
    with capture_logs() as events:
        answer = refusal_response(
            request, WebhookRefused(401, "stale timestamp"), event="feishu.webhook_refused"
        )
    assert (answer.status, answer.text) == (401, "stale timestamp")
    assert [(e["event"], e["status"], e["reason"]) for e in events] == [
        ("feishu.webhook_refused", 401, "stale timestamp")
    ]


def test_a_missing_signature_is_401_a_wrong_one_403_a_valid_one_passes() -> None:
    request = make_mocked_request("POST", "/twilio/sms")
    with capture_logs() as events:
        assert signature_refusal(Verdict.VALID, request, event="twilio.webhook_refused") is None
        missing = signature_refusal(Verdict.MISSING, request, event="twilio.webhook_refused")
        wrong = signature_refusal(Verdict.WRONG, request, event="twilio.webhook_refused")
    assert missing is not None
    assert wrong is not None
    assert [(missing.status, missing.text), (wrong.status, wrong.text)] == [
        (401, "signature missing"),
        (403, "signature wrong"),
    ]
    assert [e["reason"] for e in events] == ["missing", "wrong"]
