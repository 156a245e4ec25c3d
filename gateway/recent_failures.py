"""The last warnings and errors the daemon logged, for the status page's "recent failures".

A structlog processor (in the chain `gateway.logs` configures, for structlog's own lines and the
standard library's alike) copies every warning, error and critical event into a bounded ring;
the status page shows it, newest first. Values were redacted earlier in the chain.
"""

from __future__ import annotations

from collections import deque
from collections.abc import MutableMapping
from typing import Any

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
