"""What every platform's channel model shares: the base model and the fields worded per platform.

`ChannelConfigBase` brings the keys every channel has. Every platform has an allow list, and
every platform that receives webhooks a path on the gateway's HTTP server: what such a field is
(its default, its sentence in the generated reference) is written once here, and each platform
model fills in the words that are its own (whose ids, what arrives at the path).
"""

from __future__ import annotations

from typing import ClassVar, Self

from pydantic import Field, model_validator

from config.channels.rate_limits import RateLimitsConfig
from config.common import AllowEntry, ConfigModel
from config.problems import ModeRequires


def allow_list_field(whose: str, *, verb: str = "talk to") -> list[AllowEntry]:
    """`allow`: the senders the bot answers, empty (nobody) unless configured."""
    return Field(
        default_factory=list,
        description=f'{whose} allowed to {verb} the bot; "*" allows everyone, an empty list '
        "nobody.",
    )


def webhook_path_field(default: str, receives: str) -> str:
    """`webhook_path`: where the platform's requests arrive on the gateway's HTTP server."""
    return Field(
        default, description=f"Path on the gateway's HTTP server that receives {receives}."
    )


class ChannelConfigBase(ConfigModel):
    """Fields every channel has."""

    #: The keys a channel needs in one of its modes, checked in this order.
    MODE_REQUIRES: ClassVar[tuple[ModeRequires, ...]] = ()

    allow: list[AllowEntry] = allow_list_field("User ids or @usernames")
    edit_interval_s: float | None = Field(
        None,
        gt=0,
        description="Shortest time between edits of a streamed reply; unset uses the "
        "platform's own interval.",
    )
    pairing: bool = Field(
        False,
        description="Answer a stranger with a one-time code; `octos-gateway pair CODE` then "
        "adds them to the allow list without editing this file.",
    )
    rate_limits: RateLimitsConfig = Field(
        default_factory=RateLimitsConfig,
        description="How fast replies and edits go out: the platform's published limits "
        '(README, "Flood limits"), each overridable here.',
    )

    @model_validator(mode="after")
    def _mode_requires(self) -> Self:
        for requirement in self.MODE_REQUIRES:
            requirement.check(self)
        return self

    @property
    def routing_key(self) -> str:
        """What tells this channel apart from the profile's others: its type."""
        return str(getattr(self, "type", type(self).__name__))
