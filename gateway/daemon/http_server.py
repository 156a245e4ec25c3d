"""The daemon's HTTP server: `/healthz`, `/readyz`, `/metrics`, the status page, the links to
received files (`/media/<token>`), the owner's sends (`/v1/messages`) and webhooks."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import ValidationError

from channels.health import ChannelHealth
from channels.media_info import mime_for
from channels.media_links import ROUTE as MEDIA_ROUTE
from channels.media_links import MediaLinks
from channels.web.guard import ConnectionGuard, GuardedSite, guarded_runner
from channels.web.names import HostCheck
from config import ProfileConfig
from gateway.daemon.status_page import StatusPage
from gateway.services import WebhookRoutes
from gateway.turn.journal import OwnerSend
from gateway.turn.outbox import SendRequest, Sends, status_of
from sessions.errors import SessionError
from sessions.wal import LogWriteError

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
    messages: MessagesRoutes | None = None,
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
    if messages is not None:
        messages.mount(app)
    app.router.add_route("*", "/{tail:.*}", webhooks.handle)
    return app


#: profile -> its owner's sends, None while it is not taking messages (starting, failed).
Outboxes = Callable[[], Mapping[str, Sends | None]]


class MessagesRoutes:
    """`/v1/messages`: the owner sends into a chat (`gateway.turn.outbox`; in a cluster
    `gateway.cluster.sends`), behind `http.token` (a request from this machine needs none with
    `http.allow_local_send`)."""

    def __init__(self, outboxes: Outboxes, *, token: str | None, allow_local: bool) -> None:
        self._outboxes = outboxes
        self._token = token
        self._allow_local = allow_local

    def mount(self, app: web.Application) -> None:
        app.router.add_post(MESSAGES_ROUTE, self._guarded(self._post))
        app.router.add_get(MESSAGES_ROUTE, self._guarded(self._list))
        app.router.add_get(MESSAGES_ROUTE + "/{id}", self._guarded(self._get))
        app.router.add_delete(MESSAGES_ROUTE + "/{id}", self._guarded(self._delete))

    def _guarded(
        self, handler: Callable[[web.Request], Awaitable[web.Response]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def guarded(request: web.Request) -> web.Response:
            if not self._allowed(request):
                return _error(
                    401,
                    "a bearer token is required",
                    "send Authorization: Bearer <http.token> (set http.token in gateway.yaml)",
                    headers={"WWW-Authenticate": "Bearer"},
                )
            try:
                return await handler(request)
            except SessionError as error:
                # The cluster's table (PostgreSQL) is away: nothing was taken or changed.
                return _error(503, f"the sends' database is not available: {error}", "try again")

        return guarded

    def _allowed(self, request: web.Request) -> bool:
        if self._allow_local and _is_loopback(request.remote):
            return True
        if self._token is None:
            return False
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self._token.encode()
        )

    async def _post(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            send_request = SendRequest.model_validate(body)
        except json.JSONDecodeError as error:
            return _error(400, f"the body is not JSON: {error}")
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'body'}: {problem['msg']}"
                for problem in error.errors(include_url=False)
            )
            return _error(400, problems)
        if (unsupported := send_request.unsupported()) is not None:
            return _error(400, unsupported)
        outboxes = self._outboxes()
        if send_request.profile not in outboxes:
            return _error(404, f"no profile {send_request.profile!r}", f"one of: {list(outboxes)}")
        outbox = outboxes[send_request.profile]
        if outbox is None:
            return _error(
                503, f"profile {send_request.profile!r} is not taking messages now", "try again"
            )
        if not outbox.knows_channel(send_request.channel):
            return _error(
                404, f"profile {send_request.profile!r} has no channel {send_request.channel!r}"
            )
        try:
            send, status = await outbox.take(send_request)
        except LogWriteError as error:
            return _error(503, f"the journal could not keep the message: {error}")
        except SessionError as error:
            return _error(503, f"the database could not keep the message: {error}", "try again")
        return web.json_response({"id": send.id, "status": status}, status=202)

    async def _list(self, request: web.Request) -> web.Response:
        wanted = request.query.get("status")
        listed = [
            {"profile": profile, **status_of(send)}
            for profile, outbox in self._outboxes().items()
            if outbox is not None
            for send in await outbox.listed()
            if wanted is None or send.status == wanted
        ]
        return web.json_response({"messages": listed})

    async def _find(self, send_id: str) -> tuple[str, Sends, OwnerSend] | None:
        for profile, outbox in self._outboxes().items():
            if outbox is not None and (send := await outbox.find(send_id)) is not None:
                return profile, outbox, send
        return None

    async def _get(self, request: web.Request) -> web.Response:
        found = await self._find(request.match_info["id"])
        if found is None:
            return _error(404, "no such message (statuses are kept 24 hours after sending)")
        profile, _outbox, send = found
        return web.json_response({"profile": profile, **status_of(send)})

    async def _delete(self, request: web.Request) -> web.Response:
        found = await self._find(request.match_info["id"])
        if found is None:
            return _error(404, "no such message (statuses are kept 24 hours after sending)")
        profile, outbox, send = found
        if await outbox.cancel(send.id) == "too_late":
            return _error(
                409, f"the message is already {send.status}: it can no longer be cancelled"
            )
        # As it stands now (in a cluster, `send` is what was read before the cancel).
        send = await outbox.find(send.id) or send
        return web.json_response({"profile": profile, **status_of(send)})


MESSAGES_ROUTE = "/v1/messages"


def _error(
    status: int, error: str, suggestion: str | None = None, *, headers: dict[str, str] | None = None
) -> web.Response:
    body = {"error": error} if suggestion is None else {"error": error, "suggestion": suggestion}
    return web.json_response(body, status=status, headers=headers)


def _is_loopback(remote: str | None) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


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
