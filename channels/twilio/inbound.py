"""What an inbound SMS/MMS webhook says, and the carrier keywords the gateway never answers.

Twilio posts a form per message: `MessageSid`, `AccountSid`, `From`, `To`, `Body`, `NumMedia`
and, per attachment, `MediaUrl{i}` / `MediaContentType{i}`. With Advanced Opt-Out on, a keyword
message also carries `OptOutType` (STOP, START, HELP).

Opt-out keywords (STOP, UNSUBSCRIBE, CANCEL, QUIT, ...) are Twilio's and the carriers' business:
Twilio answers them itself and blocks further messages to a number that opted out. The gateway
must neither answer them nor take "STOP" or "CANCEL" for its own abort word.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Twilio's default opt-out, opt-in and help keywords (matched on the whole trimmed message,
#: case-insensitively, as Twilio matches them).
CARRIER_KEYWORDS = frozenset(
    {
        "STOP",
        "STOPALL",
        "UNSUBSCRIBE",
        "CANCEL",
        "END",
        "QUIT",
        "REVOKE",
        "OPTOUT",
        "START",
        "YES",
        "UNSTOP",
        "HELP",
        "INFO",
    }
)
#: Twilio sends at most 10 attachments per MMS.
MAX_MEDIA = 10

Params = Mapping[str, Sequence[str]]


class MalformedWebhook(ValueError):
    """A signed request that is not an inbound message (missing MessageSid or From)."""


@dataclass(frozen=True, slots=True)
class Sms:
    sid: str
    sender: str
    to: str
    body: str
    #: The attachments' `MediaUrl{i}`. Their `MediaContentType{i}` is not kept: a saved file
    #: is named by the content type its download answers with.
    media_urls: tuple[str, ...]
    opt_out_type: str | None

    @property
    def is_carrier_keyword(self) -> bool:
        return self.opt_out_type is not None or self.body.strip().upper() in CARRIER_KEYWORDS


def _one(params: Params, name: str) -> str:
    values = params.get(name) or ()
    return values[0] if values else ""


def parse_sms(params: Params) -> Sms:
    sid, sender = _one(params, "MessageSid"), _one(params, "From")
    if not sid or not sender:
        raise MalformedWebhook("an inbound message needs MessageSid and From")
    try:
        count = min(MAX_MEDIA, max(0, int(_one(params, "NumMedia") or "0")))
    except ValueError as error:
        raise MalformedWebhook("NumMedia is not a number") from error
    media_urls = tuple(url for index in range(count) if (url := _one(params, f"MediaUrl{index}")))
    return Sms(
        sid=sid,
        sender=sender,
        to=_one(params, "To"),
        body=_one(params, "Body"),
        media_urls=media_urls,
        opt_out_type=_one(params, "OptOutType") or None,
    )
