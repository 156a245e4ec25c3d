"""Structured logging: JSON in production, readable on a terminal, secrets redacted.

For the status page's "recent failures", a structlog processor (in the chain `configure_logging`
builds, for structlog's own lines and the standard library's alike) copies every warning, error and
critical event into a bounded ring; the status page shows it, newest first. Values were redacted
earlier in the chain.
"""

from __future__ import annotations

import logging
import re
import sys
from collections import deque
from collections.abc import Mapping, MutableMapping
from typing import Any, Literal, TextIO

import structlog

MAX_FAILURES = 50
_LEVELS = frozenset({"warning", "error", "critical", "exception"})
_SHOWN_KEYS = ("profile", "channel", "error", "reason", "detail", "suggestion")


class RecentFailures:
    def __init__(self, capacity: int = MAX_FAILURES) -> None:
        self._events: deque[dict[str, str]] = deque(maxlen=capacity)

    def __call__(
        self, _logger: Any, method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        level = str(event_dict.get("level", method)).lower()
        if level in _LEVELS:
            entry = {
                "time": str(event_dict.get("timestamp", "")),
                "level": level,
                "event": str(event_dict.get("event", "")),
            }
            details = [f"{k}={event_dict[k]}" for k in _SHOWN_KEYS if event_dict.get(k)]
            entry["detail"] = " ".join(details)[:500]
            self._events.append(entry)
        return event_dict

    def newest_first(self) -> list[dict[str, str]]:
        return list(reversed(self._events))


#: The daemon's one ring (one process, one log configuration).
recent_failures = RecentFailures()


# A bot token in a URL (Telegram puts it in the path), Slack tokens, and bearer credentials.
_SECRET_PATTERNS = (
    (re.compile(r"bot\d+:[A-Za-z0-9_-]{20,}"), "bot<redacted>"),
    (re.compile(r"xox[abposre]-[A-Za-z0-9-]+"), "xox?-<redacted>"),
    (re.compile(r"xapp-[A-Za-z0-9-]+"), "xapp-<redacted>"),
    (
        re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(bearer|bot|basic)?\s*[^\s'\",}]+"),
        r"\1<redacted>",
    ),
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1<redacted>"),
    (re.compile(r"sk-[A-Za-z0-9_-]{16,}"), "sk-<redacted>"),
    # The password of a PostgreSQL DSN (gateway.yaml's store.dsn).
    (re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]+@"), r"\1<redacted>@"),
)

#: SDK loggers that are chatty at INFO (httpx logs Telegram's token in every request URL).
_NOISY_LOGGERS = (
    "httpx",
    "httpcore",
    "telegram",
    "discord",
    "slack_bolt",
    "slack_sdk",
    # Logs every request's URL and headers at INFO.
    "twilio",
    "aiohttp.access",
    "openai",
    "asyncio",
    # Logs every block rule it tries at DEBUG: hundreds of lines per rendered reply.
    "markdown_it",
    # Log whole response bodies at DEBUG (nio every parsed /sync: users' messages, 100 KB lines).
    "nio",
    "linebot",
)


#: Whether debug lines are written: a line on the hot path (a few a turn) checks this first, as
#: a filtered-out `log.debug` still costs a call through structlog's lazy logger. True until
#: `configure_logging` says otherwise, as structlog unconfigured writes every level.
debug_enabled = True


def redact(text: str) -> str:
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {
            key: "<redacted>" if str(key).lower() == "authorization" else _redact_value(item)
            for key, item in value.items()
        }
    return value


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: no token survives into a log line, whichever field carries it."""
    for key, value in list(event_dict.items()):
        event_dict[key] = _redact_value(value)
    return event_dict


def configure_logging(
    level: str = "info",
    fmt: Literal["json", "console"] = "console",
    stream: TextIO | None = None,
    *,
    once_per_process: bool = False,
) -> None:
    """Configure structlog and the standard library's logging to write to `stream` (stderr).

    `once_per_process` (the daemon): each module's logger is assembled on its first use and
    kept, instead of once per call (on every line, even one its level filters out). Only
    for a process that configures logging once: a kept logger ignores later configuration.
    """
    global debug_enabled
    out = stream or sys.stderr
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    debug_enabled = numeric_level <= logging.DEBUG
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        redact_secrets,
        recent_failures,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=once_per_process,
    )
    # Standard-library loggers (the SDKs', aiohttp's, httpx's) are rendered by the same
    # processors, so their lines are JSON too, redacted, and named by their logger.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric_level)
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(max(numeric_level, logging.WARNING))
