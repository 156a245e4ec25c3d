"""Host and Origin checks: which names a listener answers to."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from channels.web.names import HostCheck, host_name, listener_names, origin_allowed
from config.http_limits import LOOPBACK_HOSTS


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost:8091", "localhost"),
        ("LOCALHOST", "localhost"),
        ("127.0.0.1:80", "127.0.0.1"),
        ("[::1]:8091", "::1"),
        ("[::1]", "::1"),
        ("bot.example.com.", "bot.example.com"),
        ("evil.example:notaport", None),
        ("[::1", None),
        ("[::1]x", None),
        ("caf\u00e9.example", None),
        ("", None),
    ],
)
def test_host_names_are_read_without_their_port(header: str, name: str | None) -> None:
    assert host_name(header) == name


def check(names: set[str], host: str | None) -> int | None:
    headers = {"Host": host} if host is not None else {}
    refused = HostCheck(names, "allowed_hosts").refusal(make_mocked_request("GET", "/", headers))
    return None if refused is None else refused.status


def test_loopback_names_and_the_listeners_own_address_are_allowed() -> None:
    names = listener_names("192.168.1.5", LOOPBACK_HOSTS)
    for host in ("localhost:1", "app.localhost", "127.0.0.1", "[::1]:9", "192.168.1.5:8091"):
        assert check(names, host) is None, host
    for host in ("evil.example", "localhost.evil.example", "caf\u00e9"):
        assert check(names, host) == 421, host
    # An address literal cannot be a rebinding (that needs a name): a page reached by IP works.
    for host in ("127.0.0.2", "10.1.2.3:8091", "[fe80::1]:80"):
        assert check(names, host) is None, host
    assert check(names, None) is None  # HTTP/1.0 without Host is no browser


def test_wildcards_allow_subdomains_or_everything() -> None:
    names = listener_names("0.0.0.0", ["*.example.com"])
    assert "0.0.0.0" not in names
    assert check(names, "bot.example.com") is None
    assert check(names, "a.b.example.com") is None
    assert check(names, "example.com") == 421
    assert check(names, "notexample.com") == 421
    assert check(listener_names("0.0.0.0", ["*"]), "anything.at.all") is None


def test_an_origin_must_be_the_pages_own_or_listed() -> None:
    def allowed(origin: str | None, listed: list[str]) -> bool:
        headers = {"Host": "127.0.0.1:8091"}
        if origin is not None:
            headers["Origin"] = origin
        return origin_allowed(make_mocked_request("POST", "/v1/chat", headers), listed)

    assert allowed(None, [])
    assert allowed("http://127.0.0.1:8091", [])
    assert not allowed("http://127.0.0.1:9999", [])
    assert not allowed("https://evil.example", [])
    assert not allowed("null", [])
    assert allowed("https://app.example", ["https://app.example"])
    assert allowed("https://evil.example", ["*"])
    assert not allowed("http://caf\u00e9.example", [])
