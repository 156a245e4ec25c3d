"""How a webhook answers the platform once it has handed a message to the gateway.

A webhook handler awaits `inbound.send(message)` (which returns once the message is durable)
and only then answers 2xx. When the gateway's backlog is full, `send` raises `InboundRefused`
and nothing was stored: `refused_response` turns that into 429/503 with `Retry-After`, which
every platform's webhook delivery retries later. `hand_over` is that whole exchange for the
webhooks whose refusals are plain text (Feishu, WeCom, LINE, Twilio, WhatsApp).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable

import structlog
from aiohttp import web

from bus import InboundRefused, PipeClosed

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
