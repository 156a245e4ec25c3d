"""A webhook request turned away before the gateway sees it, and how that is answered.

Feishu and WeCom check a request in several steps (decrypt, signature, timestamp, token); each
step raises `WebhookRefused` with the HTTP status and a short reason, and the handler answers
them all in one place (`refusal_response`): logged with the caller's address, the reason as the
body. A timestamp further than `max_skew_s` from our clock is a replay (`is_stale`).

Twilio and WhatsApp sign with one header over the request: their check gives a `Verdict`, and
`signature_refusal` answers a missing signature 401 and a wrong one 403; `signed_request_refusal`
adds the 503 of a channel not running, checked after the signature so that only the platform
learns whether we run.
"""

from __future__ import annotations

from enum import StrEnum

import structlog
from aiohttp import web

log = structlog.get_logger(__name__)

#: How far a signed timestamp may be from our clock, in seconds, before it is a replay.
DEFAULT_MAX_SKEW_S = 300.0


def not_running() -> web.Response:
    """The answer to a webhook that arrives while its channel does not take messages: 503, so
    the platform delivers it again later."""
    return web.Response(status=503, text="channel not running")


class Verdict(StrEnum):
    VALID = "valid"
    MISSING = "missing"
    WRONG = "wrong"


_VERDICT_STATUS = {Verdict.MISSING: 401, Verdict.WRONG: 403}


class WebhookRefused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def is_stale(timestamp: str, now_s: float, max_skew_s: float = DEFAULT_MAX_SKEW_S) -> bool:
    """Whether `timestamp` (whole seconds since the epoch, as text) is not within the window."""
    # `isdigit` alone admits digits `int` refuses ("²"): only ASCII digits are a timestamp.
    digits = timestamp.isascii() and timestamp.isdigit()
    return not digits or abs(now_s - int(timestamp)) > max_skew_s


def refusal_response(request: web.Request, refused: WebhookRefused, *, event: str) -> web.Response:
    log.warning(event, status=refused.status, reason=refused.reason, remote=request.remote)
    return web.Response(status=refused.status, text=refused.reason)


def signature_refusal(verdict: Verdict, request: web.Request, *, event: str) -> web.Response | None:
    """None for a valid signature; otherwise the refusal, logged as `event`."""
    if verdict is Verdict.VALID:
        return None
    log.warning(event, reason=verdict.value, remote=request.remote)
    return web.Response(status=_VERDICT_STATUS[verdict], text=f"signature {verdict}")


def signed_request_refusal(
    verdict: Verdict, request: web.Request, *, accepting: bool, event: str
) -> web.Response | None:
    """None for a validly signed request the channel takes now; otherwise how it is refused."""
    refusal = signature_refusal(verdict, request, event=event)
    if refusal is None and not accepting:
        return not_running()
    return refusal
