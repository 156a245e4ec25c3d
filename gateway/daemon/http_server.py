"""The daemon's HTTP server: `/healthz`, `/readyz`, `/metrics`, the status page, the links to
received files (`/media/<token>`) and webhooks."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from channels.health import ChannelHealth
from channels.media_info import mime_for
from channels.media_links import ROUTE as MEDIA_ROUTE
from channels.media_links import MediaLinks
from channels.web.guard import ConnectionGuard, GuardedSite, guarded_runner
from channels.web.names import HostCheck
from config import ProfileConfig
from gateway.daemon.status_page import StatusPage
from gateway.services import WebhookRoutes

#: profile -> channel -> health
HealthReport = Mapping[str, Mapping[str, ChannelHealth]]
#: Whether this process's cluster connections are up, and what /readyz shows of them.
ClusterReport = tuple[bool, dict[str, object]]


def build_app(
    registry: CollectorRegistry,
    readiness: Callable[[], Awaitable[HealthReport]],
    webhooks: WebhookRoutes,
    guard: ConnectionGuard,
    hosts: HostCheck,
    status_page: StatusPage | None = None,
    *,
    cluster: Callable[[], Awaitable[ClusterReport | None]] | None = None,
    failed: Callable[[], Mapping[str, str]] | None = None,
    media_links: MediaLinks | None = None,
) -> web.Application:
    """`failed`: each profile that is not running because it failed, and why; `media_links`
    opens the tokens of `/media/<token>`."""

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_request: web.Request) -> web.Response:
        report = await readiness()
        channels = {
            profile: {name: health.to_dict() for name, health in by_channel.items()}
            for profile, by_channel in report.items()
        }
        down = any(not h.takes_messages for by in report.values() for h in by.values())
        body: dict[str, object] = {"profiles": channels}
        if failed is not None and (failures := failed()):
            body["failed_profiles"] = dict(failures)
            down = True
        joined = await cluster() if cluster is not None else None
        if joined is not None:
            connected, body["cluster"] = joined
            down = down or not connected
        body["status"] = "unavailable" if down else "ready"
        return web.json_response(body, status=503 if down else 200)

    async def metrics(_request: web.Request) -> web.Response:
        body = generate_latest(registry)
        response = web.Response(body=body)
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        response.charset = "utf-8"
        return response

    app = web.Application(
        middlewares=[guard.middleware, hosts.middleware], client_max_size=guard.max_body_bytes
    )
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    if media_links is not None:
        app.router.add_get(MEDIA_ROUTE, _media_handler(media_links))
    if status_page is not None:
        status_page.mount(app)
    app.router.add_route("*", "/{tail:.*}", webhooks.handle)
    return app


def _media_handler(
    links: MediaLinks,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def media(request: web.Request) -> web.StreamResponse:
        opened = links.open_token(request.match_info["token"])
        data = await asyncio.to_thread(_read_unchanged, *opened) if opened else None
        if opened is None or data is None:
            # One answer for every refusal: a token tells nothing of which files exist.
            raise web.HTTPForbidden(text="this link is not valid, or has expired")
        return web.Response(
            body=data,
            content_type=mime_for(opened[0].name),
            headers={
                "Cache-Control": "private, no-store",
                "X-Content-Type-Options": "nosniff",
                "Content-Disposition": "attachment",
            },
        )

    return media


def _read_unchanged(path: Path, sha256: str) -> bytes | None:
    """The file's bytes when it still has the digest its link was made for."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == sha256 else None


class HttpServer:
    """Serves the app on host:port; `port` 0 picks a free port, readable after start."""

    def __init__(self, app: web.Application, host: str, port: int, guard: ConnectionGuard) -> None:
        self._runner = guarded_runner(app, guard)
        self._host = host
        self._port = port
        self._guard = guard
        self.bound_port: int | None = None

    async def start(self) -> None:
        await self._runner.setup()
        site = GuardedSite(self._runner, self._host, self._port, self._guard)
        await site.start()
        self.bound_port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        await self._runner.cleanup()


def webhook_hosts(profiles: Mapping[str, ProfileConfig]) -> set[str]:
    """The host names of every channel's public `webhook_url`: Host headers the server answers."""
    names: set[str] = set()
    for profile in profiles.values():
        for channel in profile.channels:
            url = getattr(channel, "webhook_url", None)
            host = urlsplit(url).hostname if isinstance(url, str) else None
            if host:
                names.add(host)
    return names
