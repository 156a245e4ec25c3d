"""Routes channels add to the daemon's HTTP server (Telegram and Slack webhooks).

aiohttp freezes its router once the server runs, but profiles come and go on SIGHUP, so one
catch-all route looks handlers up in a table that profiles mount into and unmount from.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web


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
