"""The webhook route: LINE POSTs events to the daemon's HTTP server.

Every request is checked before its body is read as JSON: an unsigned or wrongly signed one is
refused with 401, so is a signed one whose events are older than `MAX_EVENT_AGE_S` (a replay:
LINE's signature covers no timestamp, and the gateway's dedup remembers event ids at least that
long, so a replay is either recognised or refused). A good request is answered 200 only once
its events are durable (`take` returns); a full backlog is answered 429/503 with Retry-After,
which LINE's webhook redelivery retries.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from channels.line.events import LinePost, MalformedBody, event_timestamp_ms, parse_post, raw_events
from channels.web.webhook import hand_over, not_running

# LINE's webhook signature: `X-Line-Signature` = base64(HMAC-SHA256(channel secret, raw body)).
#
# Checked on the raw bytes, in constant time, before anything reads the body as JSON.
SIGNATURE_HEADER = "X-Line-Signature"


def signature_of(channel_secret: str, body: bytes) -> str:
    digest = hmac.new(channel_secret.encode("utf-8"), body, hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def signature_valid(channel_secret: str, body: bytes, offered: str | None) -> bool:
    if not offered:
        return False
    expected = signature_of(channel_secret, body).encode("ascii")
    return hmac.compare_digest(expected, offered.encode("utf-8", "replace"))


log = structlog.get_logger(__name__)

#: Events older than this are refused as replays (LINE redelivers within far less).
MAX_EVENT_AGE_S = 24 * 3600.0
_MAX_EVENT_AGE_MS = MAX_EVENT_AGE_S * 1000

TakePosts = Callable[[list[LinePost]], Awaitable[None]]


class LineWebhook:
    """The aiohttp handler of the webhook route; `take` is set while the channel runs."""

    def __init__(self, channel_secret: str, *, clock: Callable[[], float] = time.time) -> None:
        self._secret = channel_secret
        self._clock = clock
        self.take: TakePosts | None = None

    def _refuse(self, request: web.Request, reason: str, text: str) -> web.Response:
        log.warning("line.webhook_refused", reason=reason, remote=request.remote)
        return web.Response(status=401, text=text)

    async def handle_request(self, request: web.Request) -> web.Response:
        body = await request.read()
        offered = request.headers.get(SIGNATURE_HEADER)
        if offered is None:
            return self._refuse(request, "unsigned", f"missing {SIGNATURE_HEADER}")
        if not signature_valid(self._secret, body, offered):
            return self._refuse(request, "bad_signature", f"wrong {SIGNATURE_HEADER}")
        take = self.take
        if take is None:
            return not_running()
        try:
            raws = raw_events(body)
        except MalformedBody as error:
            log.warning("line.malformed_webhook", error=str(error))
            return web.Response(status=400, text=str(error))
        now_ms = self._clock() * 1000
        if any(now_ms - (event_timestamp_ms(raw) or now_ms) > _MAX_EVENT_AGE_MS for raw in raws):
            return self._refuse(request, "stale", "stale event")
        posts = [post for raw in raws if (post := parse_post(raw)) is not None]
        refusal = await hand_over(take(posts), event="line.webhook_backpressure")
        if refusal is not None:
            return refusal
        return web.json_response({})
