"""The standard library's loggers rendered like structlog's, and the recent-failures ring."""

from __future__ import annotations

import json
import logging

import pytest
import structlog

from gateway.logs import RecentFailures, configure_logging, recent_failures

TELEGRAM_URL = "https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/getMe"


def test_stdlib_lines_are_json_named_by_logger_with_their_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    configure_logging("info", "json")
    try:
        logging.getLogger("aiohttp.server").warning("bad request from %s", TELEGRAM_URL)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("aiohttp.server").exception("Error handling request")
    finally:
        structlog.reset_defaults()
        root.handlers[:], root.level = saved_handlers, saved_level
    first, second = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    assert first["logger"] == "aiohttp.server"
    assert first["level"] == "warning"
    assert "bot<redacted>" in first["event"]
    assert "timestamp" in first
    assert second["level"] == "error"
    assert "RuntimeError: boom" in second["exception"]
    newest = recent_failures.newest_first()[0]
    assert newest["event"] == "Error handling request"


def test_the_ring_keeps_the_newest_warnings_and_errors_only() -> None:
    ring = RecentFailures(capacity=2)
    for level, name in [("info", "a"), ("warning", "b"), ("error", "c"), ("critical", "d")]:
        ring(None, level, {"event": name, "level": level, "channel": "telegram", "error": "x"})
    assert [entry["event"] for entry in ring.newest_first()] == ["d", "c"]
    assert ring.newest_first()[0]["detail"] == "channel=telegram error=x"
