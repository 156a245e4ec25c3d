"""`channels[].rate_limits`: a profile's override of a platform's published send rates.

Each platform's package declares its rates (`channels/<platform>/rates.py`); a key left unset
here keeps the platform's figure, so an override names only what differs (a Discord bot granted
a higher global limit, a Telegram bot paying for more throughput). A rate is written
`COUNT/SECONDSs`: `30/1s` is 30 messages in any second, `20/60s` 20 a minute; COUNT is also the
burst that may go out at once.
"""

from __future__ import annotations

import re
from typing import Annotated, NamedTuple

from pydantic import AfterValidator, Field

from config.common import ConfigModel
from config.problems import ConfigValueError

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
