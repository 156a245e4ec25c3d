"""The route Twilio posts inbound messages to, on the daemon's HTTP server.

Order matters: the signature is checked before anything else is looked at (a request without
`X-Twilio-Signature` is refused, unlike octos); only a signed request is parsed and handed to the
channel, and only once the channel has made it durable is Twilio answered, with empty TwiML
(`<Response/>`, so Twilio sends nothing itself). A full backlog answers 429/503 with
`Retry-After`; a channel that is not running answers 503.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from twilio.twiml.messaging_response import MessagingResponse

from channels.twilio.inbound import MalformedWebhook, Params, Sms, parse_sms
from channels.twilio.signature import SIGNATURE_HEADER, TwilioSignature
from channels.web.webhook import hand_over, signed_request_refusal

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
