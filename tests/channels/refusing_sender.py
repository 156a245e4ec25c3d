"""An inbound sender whose backlog is full for the first few messages, then takes them."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from bus import InboundMessage, InboundRefused


class RefusingSender:
    def __init__(self, refusals: int, *, retry_after_s: float = 7.0) -> None:
        self.refusals = refusals
        self.retry_after_s = retry_after_s
        self.taken: list[InboundMessage] = []

    async def send(self, message: InboundMessage) -> None:
        if self.refusals > 0:
            self.refusals -= 1
            raise InboundRefused("chat", self.retry_after_s, "this chat's backlog is full")
        self.taken.append(message)

    def close(self) -> None:
        """Nothing to release."""


async def refused_then_taken(
    http: aiohttp.ClientSession,
    url: str,
    sender: RefusingSender,
    *,
    data: object,
    headers: Mapping[str, str],
) -> None:
    """A webhook request posted twice while `sender` refuses once: the first is answered 429 with
    the sender's Retry-After, the retry is taken (200)."""
    async with http.post(url, data=data, headers=headers) as refused:
        assert refused.status == 429
        assert refused.headers["Retry-After"] == f"{sender.retry_after_s:g}"
    async with http.post(url, data=data, headers=headers) as taken:
        assert taken.status == 200
