"""Each platform's message length limit, in the unit the platform itself counts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Unit = Literal["utf16", "chars", "bytes"]


def utf16_units(text: str) -> int:
    # Every code point above the BMP is a surrogate pair: two UTF-16 units.
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True, slots=True)
class PlatformLimit:
    """How long one message may be, and how the platform measures it."""

    max_units: int
    unit: Unit

    def __post_init__(self) -> None:
        if self.max_units < 1:
            raise ValueError(f"a platform limit must be at least 1 unit, got {self.max_units}")

    def measure(self, text: str) -> int:
        if self.unit == "chars":
            return len(text)
        if self.unit == "utf16":
            return utf16_units(text)
        return len(text.encode("utf-8"))

    def fits(self, text: str) -> bool:
        return self.measure(text) <= self.max_units


PLATFORM_LIMITS: Mapping[str, PlatformLimit] = MappingProxyType(
    {
        "telegram": PlatformLimit(4096, "utf16"),
        "discord": PlatformLimit(2000, "chars"),
        "slack": PlatformLimit(4000, "chars"),
        "twilio": PlatformLimit(1600, "chars"),
        "whatsapp": PlatformLimit(4096, "chars"),
        "line": PlatformLimit(5000, "chars"),
        "wecom": PlatformLimit(2048, "bytes"),
        "matrix": PlatformLimit(32000, "bytes"),
        "feishu": PlatformLimit(30000, "bytes"),
        "qq-bot": PlatformLimit(4000, "chars"),
        "email": PlatformLimit(100000, "chars"),
        "api": PlatformLimit(1_000_000, "chars"),
        "cli": PlatformLimit(1_000_000, "chars"),
    }
)
