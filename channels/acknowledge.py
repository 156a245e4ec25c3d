"""How a webhook answers the platform once it has handed a message to the gateway.

A webhook handler awaits `inbound.send(message)` (which returns once the message is durable)
and only then answers 2xx. When the gateway's backlog is full, `send` raises `InboundRefused`
and nothing was stored: `refused_response` turns that into 429/503 with `Retry-After`, which
every platform's webhook delivery retries later.
"""

from __future__ import annotations

import math

from aiohttp import web

from bus import InboundRefused


def refused_response(error: InboundRefused) -> web.Response:
    retry_after = max(1, math.ceil(error.retry_after_s or 1.0))
    return web.json_response(
        {"error": error.message, "retry_after_s": retry_after},
        status=error.http_status,
        headers={"Retry-After": str(retry_after)},
    )
