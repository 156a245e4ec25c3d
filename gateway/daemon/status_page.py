"""The status page on the health server: `GET /` (a page) and `GET /status.json` (its data).

Read-only. Per profile: its agent, why it is not running if it failed, each channel's health with
its last error, open sessions, turns, messages in and out, send errors and restarts, the bus
queue depths, the replies waiting for their channel to deliver earlier ones, and its replies
kept as dead letters (how many, the newest with their reason); plus the recent warnings and
errors the daemon logged. The page refreshes itself every few seconds.

When the health server listens on a loopback address the data is open to this machine; beyond
loopback it needs `http.token` as a bearer token (the page asks for it once), and without a
configured token it stays closed (403 saying what to set).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from channels.api.channel import FAVICON
from channels.health import ChannelHealth
from gateway.logs import RecentFailures

STATIC_DIR = Path(__file__).parent / "static"
REFRESH_S = 3.0
_FILES = {
    "/status.js": (STATIC_DIR / "status.js", "text/javascript"),
    "/status.css": (STATIC_DIR / "status.css", "text/css"),
    # The web chat page's icon, the project's one copy.
    "/favicon.svg": (FAVICON, "image/svg+xml"),
}


@dataclass(frozen=True, slots=True)
class DeadLetterSummary:
    """A profile's replies kept as dead letters: how many, and the newest few."""

    count: int = 0
    newest: Sequence[Mapping[str, object]] = ()


@dataclass(frozen=True, slots=True)
class ProfileFacts:
    """What the daemon knows of one profile beyond its metrics."""

    agent: str
    channels: Mapping[str, ChannelHealth]
    open_sessions: int
    #: Why the profile is not running, when it failed.
    failure: str | None = None
    dead_letters: DeadLetterSummary = DeadLetterSummary()


def _samples(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in registry.collect():
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return found


def _by(
    samples: Mapping[str, list[tuple[dict[str, str], float]]],
    name: str,
    profile: str,
    key: str,
) -> dict[str, int]:
    totals: dict[str, int] = {}
    for labels, value in samples.get(name, []):
        if labels.get("profile") == profile:
            label = labels.get(key, "")
            totals[label] = totals.get(label, 0) + int(value)
    return totals


def _by_agent(
    samples: Mapping[str, list[tuple[dict[str, str], float]]], profile: str
) -> dict[str, dict[str, dict[str, int]]]:
    """Each agent's turns by result and tokens by kind."""
    agents: dict[str, dict[str, dict[str, int]]] = {}
    for name, figure, key in (
        ("octos_turns_total", "turns", "result"),
        ("octos_agent_tokens_total", "tokens", "kind"),
    ):
        for labels, value in samples.get(name, []):
            if labels.get("profile") == profile and "agent" in labels:
                counts = agents.setdefault(labels["agent"], {"turns": {}, "tokens": {}})[figure]
                counts[labels[key]] = counts.get(labels[key], 0) + int(value)
    return agents


def build_snapshot(
    profiles: Mapping[str, ProfileFacts],
    registry: CollectorRegistry,
    failures: RecentFailures,
    started_at: float,
) -> dict[str, object]:
    samples = _samples(registry)
    shown = []
    for profile_id, facts in profiles.items():
        shown.append(
            {
                "id": profile_id,
                "agent": facts.agent,
                "open_sessions": facts.open_sessions,
                "failure": facts.failure,
                "channels": [
                    {"name": name, **health.to_dict()} for name, health in facts.channels.items()
                ],
                "turns": _by(samples, "octos_turns_total", profile_id, "result"),
                "agents": _by_agent(samples, profile_id),
                "messages_in": _by(samples, "octos_messages_in_total", profile_id, "outcome"),
                "messages_out": _by(samples, "octos_messages_out_total", profile_id, "channel"),
                "send_errors": _by(samples, "octos_send_errors_total", profile_id, "reason"),
                "restarts": _by(samples, "octos_channel_restarts_total", profile_id, "channel"),
                "queue": _by(samples, "octos_queue_depth", profile_id, "direction"),
                "replies_waiting": _by(samples, "octos_replies_waiting", profile_id, "channel"),
                "dead_letters": {
                    "count": facts.dead_letters.count,
                    "newest": list(facts.dead_letters.newest),
                },
            }
        )
    return {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "uptime_s": round(time.monotonic() - started_at),
        "refresh_s": REFRESH_S,
        "profiles": shown,
        "failures": failures.newest_first(),
    }


class StatusPage:
    def __init__(
        self,
        snapshot: Callable[[], Awaitable[dict[str, object]]],
        *,
        token: str | None,
        loopback: bool,
    ) -> None:
        self._snapshot = snapshot
        self._token = token
        self._loopback = loopback

    def mount(self, app: web.Application) -> None:
        app.router.add_get("/", self._page)
        app.router.add_get("/status.json", self._data)
        for path in _FILES:
            app.router.add_get(path, self._file)

    async def _page(self, _request: web.Request) -> web.FileResponse:
        return _static(STATIC_DIR / "status.html", "text/html")

    async def _file(self, request: web.Request) -> web.FileResponse:
        path, content_type = _FILES[request.path]
        return _static(path, content_type)

    async def _data(self, request: web.Request) -> web.Response:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        response = web.json_response(await self._snapshot())
        response.headers["Cache-Control"] = "no-store"
        return response

    def _refusal(self, request: web.Request) -> web.Response | None:
        if self._token is None:
            if self._loopback:
                return None
            return web.json_response(
                {
                    "error": "the status page is closed beyond loopback without a token",
                    "suggestion": "set http.token in gateway.yaml (e.g. ${STATUS_TOKEN})",
                },
                status=403,
            )
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if hmac.compare_digest(given.encode(), self._token.encode()):
            return None
        return web.json_response(
            {"error": "a bearer token is required", "suggestion": "enter http.token"},
            status=401,
            headers={"WWW-Authenticate": "Bearer"},
        )


def _static(path: Path, content_type: str) -> web.FileResponse:
    response = web.FileResponse(path)
    response.content_type = content_type
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"
    )
    return response
