"""A channel's health as its supervisor and `/readyz` report it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class HealthStatus(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"
    UNKNOWN = "unknown"
    #: Not taking messages yet (not started, or a webhook channel before it accepts).
    STARTING = "starting"


@dataclass(frozen=True, slots=True)
class ChannelHealth:
    status: HealthStatus
    reason: str = ""

    @classmethod
    def healthy(cls) -> ChannelHealth:
        return cls(HealthStatus.HEALTHY)

    @classmethod
    def degraded(cls, reason: str) -> ChannelHealth:
        return cls(HealthStatus.DEGRADED, reason)

    @classmethod
    def down(cls, reason: str) -> ChannelHealth:
        return cls(HealthStatus.DOWN, reason)

    @classmethod
    def unknown(cls) -> ChannelHealth:
        return cls(HealthStatus.UNKNOWN)

    @classmethod
    def starting(cls, reason: str) -> ChannelHealth:
        return cls(HealthStatus.STARTING, reason)

    @property
    def is_down(self) -> bool:
        return self.status is HealthStatus.DOWN

    @property
    def takes_messages(self) -> bool:
        """False while down or starting: `/readyz` is 503 until every channel takes messages,
        so a load balancer sends no webhook to a process that would refuse it."""
        return self.status not in (HealthStatus.DOWN, HealthStatus.STARTING)

    def then(self, new: ChannelHealth) -> ChannelHealth:
        """`new`, unless this is Down: a channel that went down (its credentials refused, or
        stopped) stays down whatever its connection reports later."""
        return self if self.is_down else new

    def to_dict(self) -> dict[str, str]:
        return (
            {"status": self.status.value, "reason": self.reason}
            if self.reason
            else {"status": self.status.value}
        )
