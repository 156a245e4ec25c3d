"""Where one Discord client sends its REST calls and opens its gateway.

discord.py takes both from class attributes shared by the whole process: the REST base from
`discord.http.Route.BASE` and the gateway from `DiscordWebSocket.DEFAULT_GATEWAY` (a plain
`Client` never asks `GET /gateway/bot`; it connects to `DEFAULT_GATEWAY` and later resumes at the
`resume_gateway_url` that READY hands out). Setting those attributes would point every Discord
profile in the process at one server. Instead each client gets a `RoutedHTTPClient` that rewrites
URLs aimed at the public endpoints to its own configured ones as the request leaves, so several
profiles in one process can talk to different servers (a proxy, a test fake) side by side.
A `resume_gateway_url` from the server is used as given: the server said where to resume.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import HTTPClient, Route

DEFAULT_API_BASE_URL = "https://discord.com/api/v10"
DEFAULT_GATEWAY_URL = "wss://gateway.discord.gg"


@dataclass(frozen=True, slots=True)
class DiscordEndpoints:
    """The REST base (with its API version) and the gateway URL of one bot."""

    api_base_url: str = DEFAULT_API_BASE_URL
    gateway_url: str = DEFAULT_GATEWAY_URL

    def __post_init__(self) -> None:
        for url in (self.api_base_url, self.gateway_url):
            if not yarl.URL(url).is_absolute():
                raise ValueError(f"a Discord endpoint must be an absolute URL, got {url!r}")

    def rest_url(self, library_url: str) -> str:
        """`library_url` as discord.py built it from `Route.BASE`, moved to our REST base."""
        library_base = Route.BASE
        if not library_url.startswith(library_base):
            return library_url
        return self.api_base_url.rstrip("/") + library_url[len(library_base) :]

    def gateway_connect_url(self, library_url: str) -> str:
        """The first gateway connection goes to our gateway; a resume URL is kept as given."""
        url = yarl.URL(library_url)
        default = DiscordWebSocket.DEFAULT_GATEWAY
        if (url.scheme, url.host, url.port) != (default.scheme, default.host, default.port):
            return library_url
        return str(yarl.URL(self.gateway_url).with_query(url.query))


class RoutedHTTPClient(HTTPClient):
    """discord.py's HTTP client, sending to one bot's configured endpoints."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        endpoints: DiscordEndpoints,
        *,
        max_ratelimit_timeout_s: float,
    ) -> None:
        super().__init__(loop, max_ratelimit_timeout=max_ratelimit_timeout_s)
        self.endpoints = endpoints

    async def request(
        self,
        route: Route,
        *,
        files: Sequence[discord.File] | None = None,
        form: Iterable[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> Any:
        route.url = self.endpoints.rest_url(route.url)
        return await super().request(route, files=files, form=form, **kwargs)

    async def ws_connect(self, url: str, *, compress: int = 0) -> aiohttp.ClientWebSocketResponse:
        return await super().ws_connect(self.endpoints.gateway_connect_url(url), compress=compress)
