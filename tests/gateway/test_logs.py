"""Secrets never reach a log line."""

from __future__ import annotations

import json
import logging

import pytest
import structlog

from gateway import logs
from gateway.logs import configure_logging, redact

TELEGRAM_URL = "https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/getUpdates"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (TELEGRAM_URL, "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"),
        ("token xoxb-123456-7890-abcdefABCDEF", "xoxb-123456-7890-abcdefABCDEF"),
        ("app xapp-1-A111-222-abc", "xapp-1-A111-222-abc"),
        ("Authorization: Bearer sk-live-abcdefghijklmnop", "sk-live-abcdefghijklmnop"),
        ("{'Authorization': 'Bot MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ'}", "MTk4NjIyNDgzNDcxOTI1MjQ4"),
        ("key sk-proj-ABCDEFGHIJKLMNOPQRSTUV", "sk-proj-ABCDEFGHIJKLMNOPQRSTUV"),
        ("dsn postgresql://octos:pa55word@db:5432/octos", "pa55word"),
    ],
)
def test_redact_removes_the_secret(text: str, secret: str) -> None:
    cleaned = redact(text)
    assert secret not in cleaned
    assert "redacted" in cleaned


def test_plain_text_is_left_alone() -> None:
    text = "user 12345 said: the bot is great, see https://example.com/page"
    assert redact(text) == text


def test_structlog_and_stdlib_lines_are_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    configure_logging("info", "json")
    try:
        structlog.get_logger("test").info(
            "request", url=TELEGRAM_URL, headers={"Authorization": "Bearer abcdefgh12345678"}
        )
        logging.getLogger("some.sdk").warning("HTTP Request: POST %s", TELEGRAM_URL)
        logging.getLogger("httpx").info("quieted: %s", TELEGRAM_URL)
    finally:
        structlog.reset_defaults()
        root.handlers[:], root.level = saved_handlers, saved_level
    err = capsys.readouterr().err
    assert "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw" not in err
    assert "abcdefgh12345678" not in err
    assert "quieted" not in err  # httpx logs every URL at INFO: kept at warning
    event = json.loads(err.splitlines()[0])
    assert event["event"] == "request"
    assert event["headers"] == {"Authorization": "<redacted>"}
    assert "HTTP Request: POST" in err


@pytest.mark.parametrize(("level", "expected"), [("debug", True), ("info", False)])
def test_the_hot_path_debug_switch_follows_the_configured_level(
    level: str, expected: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    configure_logging(level, "json")
    try:
        assert logs.debug_enabled is expected
        structlog.get_logger("test").debug("a debug line")
    finally:
        structlog.reset_defaults()
        root.handlers[:], root.level = saved_handlers, saved_level
        logs.debug_enabled = True  # structlog's defaults write every level
    assert ("a debug line" in capsys.readouterr().err) is expected
