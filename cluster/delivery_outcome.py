"""What became of one reply an ingress delivered: shared by the delivery loops and hand-overs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Delivered:
    """What became of one reply: the platform ids of its messages, or why it was given up."""

    platform_ids: tuple[str, ...] = ()
    #: Set when the delivery layer gave up on it (logged and counted there): its error.
    given_up: str | None = None
    #: With `given_up`: the delivery layer's reason (`expired`, `auth`, `too_long`, ...).
    reason: str | None = None
