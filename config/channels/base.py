"""What every platform's channel model shares: the base model and the fields worded per platform.

`ChannelConfigBase` brings the keys every channel has. Every platform has an allow list, and
every platform that receives webhooks a path on the gateway's HTTP server: what such a field is
(its default, its sentence in the generated reference) is written once here, and each platform
model fills in the words that are its own (whose ids, what arrives at the path).

`RateLimitsConfig` is `channels[].rate_limits`, a profile's override of a platform's published
send rates (each platform's package declares its own): a key left unset keeps the platform's
figure. A rate is written `COUNT/SECONDSs` (`30/1s`, `20/60s`); COUNT is also the burst that may
go out at once.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, NamedTuple, Self

from pydantic import AfterValidator, Field, PositiveFloat, model_validator

from config.common import AllowEntry, ConfigModel
from config.problems import ConfigValueError, ModeRequires

_RATE = re.compile(r"\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)\s*s\s*")


class ParsedRate(NamedTuple):
    messages: int
    per_s: float


def parse_rate(text: str) -> ParsedRate:
    """`"30/1s"` as (30, 1.0); the text must already be valid (`RateText`)."""
    match = _RATE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a rate: {text!r}")
    return ParsedRate(int(match[1]), float(match[2]))


def _valid_rate(text: str) -> str:
    try:
        count, per_s = parse_rate(text)
    except ValueError:
        count, per_s = 0, 0.0
    if count < 1 or per_s <= 0:
        raise ConfigValueError(
            f"{text!r} is not a rate",
            "write COUNT/SECONDSs with both above zero, e.g. 30/1s or 20/60s",
        )
    return text


#: `COUNT/SECONDSs`, e.g. `30/1s`.
RateText = Annotated[str, AfterValidator(_valid_rate)]


class RateLimitsConfig(ConfigModel):
    """How fast the channel sends: the platform's published limits unless set here."""

    paced: bool = Field(
        True,
        description="Schedule every send and edit within the limits, and hold a refused chat "
        "(or the whole bot) for the platform's full retry_after. false: send at once and let "
        "each refused call wait on its own.",
    )
    account: RateText | None = Field(
        None,
        description="All messages of the bot together, as COUNT/SECONDSs (30/1s); unset keeps "
        "the platform's figure.",
    )
    chat: RateText | None = Field(
        None, description="The messages to one chat (1/1s); unset keeps the platform's figure."
    )
    group: RateText | None = Field(
        None,
        description="The messages to one group chat, besides `chat` (20/60s); unset keeps the "
        "platform's figure.",
    )


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
    edit_interval_s: PositiveFloat | None = Field(
        None,
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
