"""Webhook requests LINE never sends, each of which the gateway must refuse unread.

Kept as data (a name, a body, headers), so a shared webhook attack corpus can take LINE's
cases as they are: `attack_cases(fake)` builds them against a fake's channel secret.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from channels.line import SIGNATURE_HEADER
from tests.fakes.line_server import FakeLine

VICTIM = "U1111111111111111111111111111a11"


@dataclass(frozen=True, slots=True)
class AttackCase:
    name: str
    body: bytes
    headers: dict[str, str]
    #: What the log line `line.webhook_refused` gives as its reason.
    reason: str
    status: int = 401


ATTACK_NAMES = (
    "unsigned",
    "empty signature",
    "forged signature",
    "signed with another secret",
    "body changed after signing",
    "not even JSON, unsigned",
    "stale (a replay)",
)


def attack_cases(fake: FakeLine) -> list[AttackCase]:
    """One case per name in `ATTACK_NAMES`, in that order."""
    body = fake.body_of([fake.text_event(VICTIM, "let me in")])
    signed = fake.sign(body)
    flipped = ("B" if signed[SIGNATURE_HEADER][0] == "A" else "A") + signed[SIGNATURE_HEADER][1:]
    two_days_ago = int((time.time() - 2 * 86400) * 1000)
    stale = fake.body_of([fake.text_event(VICTIM, "old news", timestamp_ms=two_days_ago)])
    json_only = {"Content-Type": "application/json"}
    return [
        AttackCase("unsigned", body, json_only, "unsigned"),
        AttackCase("empty signature", body, {**json_only, SIGNATURE_HEADER: ""}, "bad_signature"),
        AttackCase(
            "forged signature", body, {**signed, SIGNATURE_HEADER: flipped}, "bad_signature"
        ),
        AttackCase(
            "signed with another secret",
            body,
            fake.sign(body, secret="not-the-channel-secret"),
            "bad_signature",
        ),
        AttackCase(
            "body changed after signing",
            body.replace(b"let me in", b"let me IN"),
            signed,
            "bad_signature",
        ),
        AttackCase("not even JSON, unsigned", b"{not json", json_only, "unsigned"),
        AttackCase("stale (a replay)", stale, fake.sign(stale), "stale"),
    ]
