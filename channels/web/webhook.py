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

import json
import math
from collections.abc import Awaitable
from enum import StrEnum
from typing import Any

import structlog
from aiohttp import web

from bus import InboundRefused, PipeClosed

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


# Reading the JSON a platform sent (a webhook body, a websocket frame): one function, one error.
#
# `json.loads` raises `RecursionError`, not `ValueError`, for a document nested a few thousand
# levels deep: a handler that caught only `ValueError` answered such a body with a 500 and a
# traceback. The channels read what a platform sends through `json_payload`, so unreadable input
# of any kind is one `UnreadableJson` (a `ValueError`). Where an SDK parses its own input (Bolt
# for Slack's HTTP mode, python-telegram-bot's polling), the channel catches its errors there.
class UnreadableJson(ValueError):
    """Not JSON, not UTF-8, or nested more deeply than the parser goes."""


def json_payload(data: bytes | str) -> Any:
    """The parsed document; `UnreadableJson` saying why when it cannot be read."""
    try:
        return json.loads(data)
    except RecursionError:
        raise UnreadableJson("nested too deeply to read; send a flatter document") from None
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise UnreadableJson(str(error)) from None


# How a webhook answers the platform once it has handed a message to the gateway.
#
# A webhook handler awaits `inbound.send(message)` (which returns once the message is durable)
# and only then answers 2xx. When the gateway's backlog is full, `send` raises `InboundRefused`
# and nothing was stored: `refused_response` turns that into 429/503 with `Retry-After`, which
# every platform's webhook delivery retries later. `hand_over` is that whole exchange for the
# webhooks whose refusals are plain text (Feishu, WeCom, LINE, Twilio, WhatsApp).
log = structlog.get_logger(__name__)


def refused_response(error: InboundRefused) -> web.Response:
    retry_after = max(1, math.ceil(error.retry_after_s or 1.0))
    return web.json_response(
        {"error": error.message, "retry_after_s": retry_after},
        status=error.http_status,
        headers={"Retry-After": str(retry_after)},
    )


async def hand_over(take: Awaitable[None], *, event: str, **context: object) -> web.Response | None:
    """Await `take` (the message handed to the gateway): None once it is durable, else the
    answer that makes the platform deliver it again (a full backlog is logged as `event`)."""
    try:
        await take
    except InboundRefused as error:
        log.warning(event, status=error.http_status, retry_after_s=error.retry_after_s, **context)
        return refused_response(error)
    except PipeClosed:
        return web.Response(status=503, text="channel stopping")
    return None
