"""The route Twilio posts inbound messages to, on the daemon's HTTP server.

Order matters: the signature is checked before anything else is looked at (a request without
`X-Twilio-Signature` is refused, unlike octos); only a signed request is parsed and handed to the
channel, and only once the channel has made it durable is Twilio answered, with empty TwiML
(`<Response/>`, so Twilio sends nothing itself). A full backlog answers 429/503 with
`Retry-After`; a channel that is not running answers 503.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import structlog
from aiohttp import web
from twilio.request_validator import RequestValidator, add_port, remove_port
from twilio.twiml.messaging_response import MessagingResponse

from channels.web.webhook import Verdict, hand_over, signed_request_refusal

# What an inbound SMS/MMS webhook says, and the carrier keywords the gateway never answers.
#
# Twilio posts a form per message: `MessageSid`, `AccountSid`, `From`, `To`, `Body`, `NumMedia`
# and, per attachment, `MediaUrl{i}` / `MediaContentType{i}`. With Advanced Opt-Out on, a keyword
# message also carries `OptOutType` (STOP, START, HELP).
#
# Opt-out keywords (STOP, UNSUBSCRIBE, CANCEL, QUIT, ...) are Twilio's and the carriers' business:
# Twilio answers them itself and blocks further messages to a number that opted out. The gateway
# must neither answer them nor take "STOP" or "CANCEL" for its own abort word.
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
    #: The attachments' `MediaUrl{i}`.
    media_urls: tuple[str, ...]
    opt_out_type: str | None
    #: Their `MediaContentType{i}`, one for each URL ("" where Twilio sent none).
    media_types: tuple[str, ...] = ()

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
    indexes = [index for index in range(count) if _one(params, f"MediaUrl{index}")]
    media_urls = tuple(_one(params, f"MediaUrl{index}") for index in indexes)
    media_types = tuple(_one(params, f"MediaContentType{index}") for index in indexes)
    return Sms(
        sid=sid,
        sender=sender,
        to=_one(params, "To"),
        body=_one(params, "Body"),
        media_urls=media_urls,
        opt_out_type=_one(params, "OptOutType") or None,
        media_types=media_types,
    )


# X-Twilio-Signature: Twilio's proof that a webhook request is its own.
#
# The signature is base64(HMAC-SHA1(auth_token, url + each POST parameter's name and value,
# sorted by name)), over the exact URL Twilio called (`public_url`: behind a proxy the daemon
# sees another one). The twilio library's `RequestValidator` computes it; the comparison is
# `hmac.compare_digest`, in constant time. Twilio signs some URLs with the port and some without
# (an inconsistency its own validator allows for), so both forms are accepted. A fragment
# (Twilio's connection overrides, `#rc=3&rp=all`) is not part of the signed URL.
#
# A request without the header is refused: octos checked the signature only when the header was
# present, so leaving it out was enough to forge a message.
SIGNATURE_HEADER = "X-Twilio-Signature"


class TwilioSignature:
    """Checks requests against one account's auth token and one public URL."""

    def __init__(self, auth_token: str, public_url: str) -> None:
        self._validator = RequestValidator(auth_token)
        # Connection overrides (`#rc=3&rp=all`) live in the fragment, which is never sent.
        parsed = urlsplit(public_url)._replace(fragment="")
        self._urls = tuple(dict.fromkeys([remove_port(parsed), add_port(parsed)]))

    def sign(self, params: Mapping[str, Sequence[str]], url: str | None = None) -> str:
        """The signature of `params` posted to `url` (default: the public URL)."""
        return str(self._validator.compute_signature(url or self._urls[0], _Multi(params)))

    def check(self, params: Mapping[str, Sequence[str]], offered: str | None) -> Verdict:
        if not offered:
            return Verdict.MISSING
        expected = [self.sign(params, url).encode() for url in self._urls]
        # Every candidate is compared, so the time taken does not say which one matched.
        matches = [hmac.compare_digest(candidate, offered.encode()) for candidate in expected]
        return Verdict.VALID if any(matches) else Verdict.WRONG


class _Multi(dict[str, list[str]]):
    """Repeated parameters as `RequestValidator.get_values` reads them (`getall`)."""

    def __init__(self, params: Mapping[str, Sequence[str]]) -> None:
        super().__init__({name: list(values) for name, values in params.items()})

    def getall(self, name: str) -> list[str]:
        return self[name]


log = structlog.get_logger(__name__)


def empty_twiml() -> web.Response:
    return web.Response(text=str(MessagingResponse()), content_type="text/xml")


async def form_params(request: web.Request) -> dict[str, list[str]]:
    """The POST parameters, each with all its values (a name may repeat)."""
    form = await request.post()
    params: dict[str, list[str]] = {}
    for name, value in form.items():
        if isinstance(value, str):
            params.setdefault(name, []).append(value)
    return params


class TwilioWebhook:
    def __init__(
        self,
        signature: TwilioSignature,
        take: Callable[[Sms], Awaitable[None]],
        accepting: Callable[[], bool],
    ) -> None:
        self._signature = signature
        self._take = take
        self._accepting = accepting

    async def handle(self, request: web.Request) -> web.Response:
        try:
            params: Params = await form_params(request)
        except ValueError:  # UnicodeDecodeError: not the UTF-8 form Twilio posts
            log.warning("twilio.webhook_refused", reason="unreadable_form", remote=request.remote)
            return web.Response(status=400, text="the body is not a UTF-8 url-encoded form")
        verdict = self._signature.check(params, request.headers.get(SIGNATURE_HEADER))
        refusal = signed_request_refusal(
            verdict, request, accepting=self._accepting(), event="twilio.webhook_refused"
        )
        if refusal is not None:
            return refusal
        try:
            sms = parse_sms(params)
        except MalformedWebhook as error:
            # Signed by Twilio but not a message (a status callback sent here by mistake):
            # answered, so Twilio does not retry what can never be handled.
            log.warning("twilio.malformed_webhook", error=str(error), params=sorted(params))
            return empty_twiml()
        refusal = await hand_over(self._take(sms), event="twilio.webhook_backlog_full", sid=sms.sid)
        if refusal is not None:
            return refusal
        return empty_twiml()
