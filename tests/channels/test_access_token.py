"""The shared access-token cache: one fetch for many callers, early refresh, invalidation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from channels.errors import AuthError, ChannelError
from channels.web.client import AccessTokenCache, IssuedToken, TokenRefused, issued_token
from tests.channels.conftest import FakeClock


class Issuer:
    def __init__(self, expires_in_s: float = 7200.0) -> None:
        self.expires_in_s = expires_in_s
        self.issued = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self) -> IssuedToken:
        await self.gate.wait()
        self.issued += 1
        return IssuedToken(f"token-{self.issued}", self.expires_in_s)


def cache_of(issuer: Issuer, **timing: Any) -> AccessTokenCache:
    return AccessTokenCache(issuer, channel="test", credentials_hint="check the secret", **timing)


async def test_the_token_is_fetched_once_and_reused(clock: FakeClock) -> None:
    issuer = Issuer()
    cache = AccessTokenCache(
        issuer, channel="test", credentials_hint="check the secret", clock=clock
    )
    assert [await cache.get() for _ in range(3)] == ["token-1"] * 3
    assert issuer.issued == 1


async def test_concurrent_callers_share_one_fetch(clock: FakeClock) -> None:
    issuer = Issuer()
    issuer.gate.clear()
    cache = AccessTokenCache(
        issuer, channel="test", credentials_hint="check the secret", clock=clock
    )
    waiting = [asyncio.create_task(cache.get(), name=f"get-{n}") for n in range(5)]
    await asyncio.sleep(0)
    issuer.gate.set()
    assert await asyncio.gather(*waiting) == ["token-1"] * 5
    assert issuer.issued == 1


async def test_it_is_refreshed_before_it_expires(clock: FakeClock) -> None:
    issuer = Issuer(expires_in_s=7200)
    cache = AccessTokenCache(
        issuer,
        channel="test",
        credentials_hint="check the secret",
        early_refresh_s=300,
        clock=clock,
    )
    assert await cache.get() == "token-1"
    clock.advance(7200 - 301)
    assert await cache.get() == "token-1"
    clock.advance(2)  # within the last 300 s of its life
    assert await cache.get() == "token-2"


async def test_a_short_lived_token_is_refreshed_at_four_fifths_of_its_life(
    clock: FakeClock,
) -> None:
    cache = AccessTokenCache(
        Issuer(expires_in_s=100),
        channel="test",
        credentials_hint="check the secret",
        early_refresh_s=300,
        clock=clock,
    )
    assert await cache.get() == "token-1"
    clock.advance(79)
    assert await cache.get() == "token-1"
    clock.advance(2)
    assert await cache.get() == "token-2"


async def test_an_invalidated_token_is_refetched_once(clock: FakeClock) -> None:
    issuer = Issuer()
    cache = AccessTokenCache(
        issuer, channel="test", credentials_hint="check the secret", clock=clock
    )
    stale = await cache.get()
    cache.invalidate(stale)
    fresh = await cache.get()
    cache.invalidate(stale)  # a second caller reporting the same old token changes nothing
    assert (fresh, await cache.get(), issuer.issued) == ("token-2", "token-2", 2)


async def test_a_refused_token_is_replaced_and_the_call_repeated_once(clock: FakeClock) -> None:
    issuer = Issuer()
    cache = AccessTokenCache(
        issuer, channel="test", credentials_hint="check the secret", clock=clock
    )
    carried: list[str] = []

    async def call(token: str) -> str:
        carried.append(token)
        if token == "token-1":
            raise TokenRefused("expired early")
        return "answer"

    assert await cache.call_with_token(call, what="send") == "answer"
    assert carried == ["token-1", "token-2"]


async def test_a_fresh_token_refused_as_well_is_raised(clock: FakeClock) -> None:
    issuer = Issuer()
    cache = AccessTokenCache(
        issuer, channel="test", credentials_hint="check the secret", clock=clock
    )

    async def call(_token: str) -> str:
        raise TokenRefused("revoked")

    with pytest.raises(AuthError, match="send: a fresh access token was refused") as refused:
        await cache.call_with_token(call, what="send")
    assert (refused.value.channel, refused.value.suggestion) == ("test", "check the secret")
    # The refused token is not offered again: the next call starts with a fetch.
    await cache.get()
    assert issuer.issued == 3


def test_a_credentials_answer_gives_the_token_and_its_lifetime() -> None:
    def read(answer: dict[str, object]) -> IssuedToken:
        return issued_token(answer, "access_token", "expires_in", channel="test")

    assert read({"access_token": "t", "expires_in": 600}) == IssuedToken("t", 600.0)
    assert read({"access_token": "t", "expires_in": "7200"}) == IssuedToken("t", 7200.0)
    assert read({"access_token": "t"}) == IssuedToken("t", 7200.0)
    assert read({"access_token": "t", "expires_in": "soon"}) == IssuedToken("t", 7200.0)
    with pytest.raises(ChannelError, match="answered no access_token"):
        read({"expires_in": 600})
