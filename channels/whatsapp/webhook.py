"""The routes Meta calls for WhatsApp, on the daemon's HTTP server.

`GET` is the verification handshake: `hub.mode=subscribe` with the configured
`hub.verify_token` is answered with `hub.challenge` as plain text; anything else with 403.

`POST` carries notifications. The `X-Hub-Signature-256` HMAC of the raw body is checked before
the body is parsed (a missing header is a refusal); a signed notification is handed to the
channel, and Meta is answered 200 only once every message in it is durable. A full backlog
answers 429/503 with `Retry-After` (Meta retries the whole notification; the messages already
taken are recognised by their wamid); a channel that is not running answers 503.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from channels.web.webhook import (
    UnreadableJson,
    Verdict,
    hand_over,
    json_payload,
    signed_request_refusal,
)
from channels.whatsapp.inbound import MalformedWebhook, Notification, parse_notification

# X-Hub-Signature-256: Meta's proof that a webhook request is its own.
#
# `sha256=` + hex(HMAC-SHA256(app_secret, raw body)), checked on the raw bytes before anything is
# parsed, compared with `hmac.compare_digest` in constant time. A missing header is a refusal.
SIGNATURE_HEADER = "X-Hub-Signature-256"
_PREFIX = "sha256="


def sign(app_secret: str, body: bytes) -> str:
    return _PREFIX + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()


def check(app_secret: str, body: bytes, offered: str | None) -> Verdict:
    if not offered:
        return Verdict.MISSING
    if not hmac.compare_digest(sign(app_secret, body).encode(), offered.strip().encode()):
        return Verdict.WRONG
    return Verdict.VALID


log = structlog.get_logger(__name__)


class WhatsAppWebhook:
    def __init__(
        self,
        *,
        app_secret: str,
        verify_token: str,
        phone_number_id: str,
        take: Callable[[Notification], Awaitable[None]],
        accepting: Callable[[], bool],
    ) -> None:
        self._app_secret = app_secret
        self._verify_token = verify_token.encode()
        self._phone_number_id = phone_number_id
        self._take = take
        self._accepting = accepting

    async def verify(self, request: web.Request) -> web.Response:
        query = request.query
        offered = query.get("hub.verify_token", "").encode()
        challenge = query.get("hub.challenge", "")
        token_ok = hmac.compare_digest(offered, self._verify_token)
        if query.get("hub.mode") == "subscribe" and token_ok and challenge:
            log.info("whatsapp.webhook_verified")
            return web.Response(text=challenge, content_type="text/plain")
        log.warning(
            "whatsapp.verification_refused", mode=query.get("hub.mode"), remote=request.remote
        )
        return web.Response(status=403, text="verification refused")

    async def receive(self, request: web.Request) -> web.Response:
        body = await request.read()
        verdict = check(self._app_secret, body, request.headers.get(SIGNATURE_HEADER))
        refusal = signed_request_refusal(
            verdict, request, accepting=self._accepting(), event="whatsapp.webhook_refused"
        )
        if refusal is not None:
            return refusal
        try:
            notification = parse_notification(json_payload(body), self._phone_number_id)
        except (UnreadableJson, MalformedWebhook) as error:
            # Signed by Meta, so a retry would bring the same bytes: answered and logged.
            log.warning("whatsapp.malformed_webhook", error=str(error), size=len(body))
            return web.Response(text="ok")
        refusal = await hand_over(self._take(notification), event="whatsapp.webhook_backlog_full")
        if refusal is not None:
            return refusal
        return web.Response(text="ok")
