"""What the pieces of a profile are handed: the process's services and the profile's own.

`ProcessServices` is what the daemon gives every profile it starts, in one process or in a
cluster (the data directory, the session store's settings, the bus size, metrics, webhook routes,
the way to ask for shutdown, the pairing databases, the media links). `ProfileServices` is what
one profile builds once and gives whole to its turn runner, its commands and its dispatcher
(or, in a cluster worker, to the worker's answering side): its configuration, sessions, active
topics, metrics and its directory.

Channels add routes to the daemon's HTTP server (Telegram and Slack webhooks). aiohttp freezes
its router once the server runs, but profiles come and go on SIGHUP, so one catch-all route
looks handlers up in a table that profiles mount into and unmount from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from channels.media_links import MediaLinks
from config import ProfileConfig
from config.bus import BusConfig
from config.store import StoreConfig
from gateway.metrics import GatewayMetrics
from gateway.pairing import PairingDatabases
from sessions import SessionManager
from sessions.topics import ActiveTopicsStore


class WebhookRoutes:
    def __init__(self) -> None:
        self._handlers: dict[tuple[str, str], tuple[str, web.RouteDef]] = {}

    def mount(self, owner: str, routes: Iterable[web.AbstractRouteDef]) -> None:
        for route in routes:
            if not isinstance(route, web.RouteDef):
                raise TypeError(f"{owner}: only plain routes can be mounted, got {route!r}")
            slot = (route.method.upper(), route.path)
            taken = self._handlers.get(slot)
            if taken is not None and taken[0] != owner:
                raise ValueError(
                    f"{owner}: {route.method} {route.path} is already served by {taken[0]}; "
                    "give one of the channels another webhook_path"
                )
            self._handlers[slot] = (owner, route)

    def unmount(self, owner: str) -> None:
        self._handlers = {
            slot: entry for slot, entry in self._handlers.items() if entry[0] != owner
        }

    async def handle(self, request: web.Request) -> web.StreamResponse:
        entry = self._handlers.get((request.method, request.path))
        if entry is None:
            raise web.HTTPNotFound(text="no such route")
        return await entry[1].handler(request)


@dataclass(frozen=True, slots=True)
class ProcessServices:
    """Shared by every profile of the process; a profile's files are under `data_dir / id`."""

    data_dir: Path
    store: StoreConfig
    bus: BusConfig
    metrics: GatewayMetrics
    webhooks: WebhookRoutes
    request_shutdown: Callable[[], None]
    #: The pairing databases every profile of the process shares a pool and listener on.
    pairing: PairingDatabases
    #: The signed links to files under `data_dir` the gateway's HTTP server serves (a webhook
    #: agent's attachments, a reply's files on a platform that takes a URL); None when the
    #: data directory has no link secret (it could not be written).
    media_links: MediaLinks | None = None


@dataclass(frozen=True, slots=True)
class ProfileServices:
    """One profile's shared state, built by the profile and taken whole by each of its parts."""

    profile: str
    config: ProfileConfig
    sessions: SessionManager
    topics: ActiveTopicsStore
    metrics: GatewayMetrics
    #: The profile's own directory (`data_dir / profile`): a reply's files are kept under it.
    root: Path
