"""Attacks on a signed webhook, described the same way for every platform.

A platform gives a `WebhookSigner` (how its real sender signs a body, and which header carries
the signature); `standard_attacks` turns one genuine body into the requests an attacker can
make without the secret: unsigned, signed with a guessed secret, signed for one body and sent
with another. A platform adds its own (a stale or replayed request) as further `Attack`s. Each
attack says which statuses count as refused; a test posts them to the daemon and then checks
that nothing reached the agent. Shaped so that a shared corpus can take these over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

from tests.support.attack_corpus import REFUSED


@dataclass(frozen=True, slots=True)
class WebhookRequest:
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Attack:
    name: str
    request: WebhookRequest
    #: Statuses that count as the attack being refused.
    refused: tuple[int, ...] = REFUSED


@dataclass(frozen=True, slots=True)
class WebhookSigner:
    """How one platform signs: `sign(body, secret)` gives the signature headers."""

    content_type: str
    sign: Callable[[bytes, str], Mapping[str, str]]
    secret: str

    def genuine(self, body: bytes) -> WebhookRequest:
        return WebhookRequest(body, {**self.sign(body, self.secret), **self._type})

    @property
    def _type(self) -> dict[str, str]:
        return {"Content-Type": self.content_type}

    def unsigned(self, body: bytes) -> WebhookRequest:
        return WebhookRequest(body, self._type)

    def signed_with(self, body: bytes, secret: str) -> WebhookRequest:
        return WebhookRequest(body, {**self.sign(body, secret), **self._type})

    def tampered(self, signed_body: bytes, sent_body: bytes) -> WebhookRequest:
        return WebhookRequest(sent_body, {**self.sign(signed_body, self.secret), **self._type})


def standard_attacks(signer: WebhookSigner, body: bytes, other_body: bytes) -> list[Attack]:
    """Unsigned, forged (a guessed secret) and tampered (signature of another body)."""
    return [
        Attack("unsigned", signer.unsigned(body)),
        Attack("forged", signer.signed_with(body, "a-guessed-secret")),
        Attack("tampered", signer.tampered(other_body, body)),
    ]


async def post(url: str, request: WebhookRequest) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=request.body, headers=dict(request.headers)) as response,
    ):
        await response.read()
        return response.status
