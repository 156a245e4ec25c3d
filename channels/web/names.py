"""Browser attacks on a listener: the `Host` it is called by and the `Origin` a page sends.

DNS rebinding points a name the attacker owns at 127.0.0.1, so a page on that name can read a
loopback API as "same origin"; the only trace is the `Host` header, which then names the
attacker's domain. `HostCheck` answers 421 to a Host that is not one of the listener's names.
A cross-site page can still send "simple" requests (a text/plain POST) without asking CORS
first; `origin_allowed` refuses a request whose `Origin` is neither the listener's own nor listed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler

WILDCARD_ADDRESSES = ("", "0.0.0.0", "::")


def host_name(header: str) -> str | None:
    """The name in a Host header without its port, lower case; None when it is malformed."""
    text = header.strip().lower()
    if not text or not text.isascii():
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        name, rest = text[1:end], text[end + 1 :]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        return name
    name, colon, port = text.partition(":")
    if colon and not port.isdigit():
        return None
    return name.rstrip(".") or None


def listener_names(host: str, configured: Iterable[str], extra: Iterable[str] = ()) -> set[str]:
    """The configured names, plus the listener's own address when it is a specific one."""
    names = {name.strip().lower().rstrip(".") for name in [*configured, *extra] if name.strip()}
    if host not in WILDCARD_ADDRESSES:
        names.add(host.strip("[]").lower())
    return names


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _matches(name: str, allowed: set[str]) -> bool:
    if "*" in allowed or name in allowed:
        return True
    if _is_address(name):
        # A Host that is an address literal cannot come from DNS rebinding, which needs a name
        # the attacker controls: a page reached by IP (a server on the LAN) is its own origin.
        return True
    parts = name.split(".")
    return any("*." + ".".join(parts[i:]) in allowed for i in range(1, len(parts)))


class HostCheck:
    def __init__(self, allowed: set[str], where: str) -> None:
        #: Replaced as a whole when the names change (a reload).
        self.allowed = allowed
        self._where = where

    def refusal(self, request: web.Request) -> web.Response | None:
        header = request.headers.get("Host")
        if header is None:
            return None  # HTTP/1.0 without Host: not a browser
        name = host_name(header)
        if name is not None and _matches(name, self.allowed):
            return None
        shown = header if header.isascii() else header.encode("unicode_escape").decode()
        return web.json_response(
            {
                "error": f"Host {shown[:100]!r} is not a name of this server; "
                f"add it to {self._where} if it should be",
            },
            status=421,
        )

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        refused = self.refusal(request)
        return refused if refused is not None else await handler(request)


def origin_allowed(request: web.Request, cors_origins: Iterable[str]) -> bool:
    """No Origin (not a browser's cross-site request), the page's own, or a listed one.

    The page's own origin is the one whose host and port are the request's `Host` (already
    checked against the listener's names); the scheme is not compared, since behind a proxy
    that ends TLS the page is https while the request arriving here is http.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    listed = set(cors_origins)
    if "*" in listed or origin in listed:
        return True
    host = request.headers.get("Host")
    if host is None or not origin.isascii():
        return False
    parts = urlsplit(origin.strip().lower())
    return parts.scheme in ("http", "https") and parts.netloc == host.strip().lower()
