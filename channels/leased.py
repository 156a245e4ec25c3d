"""Single-poller channels run only under their lease: one active poller per bot account.

`LeasedChannels` is the `RunChannel` a cluster's ingress gives its channel manager. A channel
whose `single_poller` is True (Telegram long polling, IMAP) is started only while this process
holds the lease of its bot account, and cancelled as soon as the lease is lost; every other
channel starts at once, as in one process. The lease itself (`gateway.cluster.lease.PollerLease`, a
JetStream KV key) is made by `lease_for`, so this layer knows nothing of NATS.

The account is the profile's channel: a profile is one bot and has at most one channel of each
name, and every ingress runs the same profiles. The key keeps both readable for operators
(`nats kv ls`), escaping what a KV key may not contain.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Protocol

from bus import InboundSender
from channels.base import Channel

#: A KV key is `[-/_=.A-Za-z0-9]+`; `.` separates the profile from the channel, `=` escapes.
_KEY_SAFE = re.compile(r"[A-Za-z0-9_-]")


class ChannelLease(Protocol):
    async def hold(
        self, run: Callable[[], Awaitable[None]], *, until: asyncio.Event | None = None
    ) -> None:
        """Run `run` while the lease is held, cancelling it when lost, until it returns;
        `until` ends a wait for the lease."""


#: Makes the lease for one key (the daemon binds the bucket, the holder id and the timings).
LeaseFor = Callable[[str], ChannelLease]


def lease_key(profile: str, channel: str) -> str:
    """The lease key of a profile's channel: `profile.channel`, other bytes as `=XX`."""
    return f"{_escaped(profile)}.{_escaped(channel)}"


def _escaped(part: str) -> str:
    return "".join(
        char if _KEY_SAFE.fullmatch(char) else "".join(f"={byte:02X}" for byte in char.encode())
        for char in part
    )


class LeasedChannels:
    def __init__(self, profile: str, lease_for: LeaseFor) -> None:
        self._profile = profile
        self._lease_for = lease_for

    async def __call__(
        self, channel: Channel, inbound: InboundSender, stopping: asyncio.Event
    ) -> None:
        if not channel.single_poller:
            await channel.start(inbound)
            return
        lease = self._lease_for(lease_key(self._profile, channel.name))
        # Stopping while still waiting ends the wait; a running channel ends by its own stop().
        await lease.hold(partial(channel.start, inbound), until=stopping)
