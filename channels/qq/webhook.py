"""QQ's webhook: signed events POSTed to the daemon's HTTP server.

Every event must carry `X-Signature-Timestamp` and `X-Signature-Ed25519`, the bot key's
signature of timestamp + raw body, and the timestamp must be recent (a replayed capture is
refused); anything else is answered 401. A request that carries the headers is checked whatever
it holds. Then:
- op 13 (callback URL validation) is answered `{plain_token, signature}`, the signature of
  `event_ts + plain_token`. QQ sends it without signature headers (its own SDK, botgo, answers
  it unsigned), so it is the one request taken unsigned. Both fields must be short plain tokens,
  so the answer can never be the signature of something that reads as an event: no signing
  oracle for forged events;
- op 0 (an event) is handed to the channel, and only once that returned (the message is
  durable) answered with the op 12 acknowledgement. A full backlog answers 429/503 with
  Retry-After, and QQ delivers the event again later. The acknowledgement of a tap
  (INTERACTION_CREATE) also carries `code: 0`, the answer `PUT /interactions/{id}` gives: QQ
  documents only that call, which the channel makes, but bots on webhooks report that QQ reads
  the code from this answer instead.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from bus import InboundRefused, PipeClosed
from channels.qq.keyboard import INTERACTION_EVENT
from channels.web.webhook import UnreadableJson, json_payload, refused_response

# QQ's Ed25519 webhook signatures, with the key QQ derives from the bot's AppSecret.
#
# QQ documents the seed as the secret repeated until it is at least 32 bytes long, then cut to
# 32 bytes; the key pair grown from that seed signs the op 13 validation answer
# (`event_ts + plain_token`) and QQ signs every event with it (`X-Signature-Timestamp + body`,
# hex in `X-Signature-Ed25519`). Both halves use `cryptography`'s Ed25519.
SEED_BYTES = 32


def seed_from_secret(secret: str) -> bytes:
    raw = secret.encode("utf-8")
    if not raw:
        raise ValueError("the QQ bot's app_secret is empty")
    repeated = raw * (SEED_BYTES // len(raw) + 1)
    return repeated[:SEED_BYTES]


def signing_key(secret: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(seed_from_secret(secret))


def sign_hex(key: Ed25519PrivateKey, message: bytes) -> str:
    return key.sign(message).hex()


def verify(public_key: Ed25519PublicKey, signature_hex: str, message: bytes) -> bool:
    """Whether `signature_hex` is the bot key's signature of `message` (constant time)."""
    try:
        signature = bytes.fromhex(signature_hex)
    except ValueError:
        return False
    if len(signature) != 64:
        return False
    try:
        public_key.verify(signature, message)
    except InvalidSignature:
        return False
    return True


log = structlog.get_logger(__name__)

SIGNATURE_HEADER = "X-Signature-Ed25519"
TIMESTAMP_HEADER = "X-Signature-Timestamp"
#: How old a signed request may be; QQ retries within seconds.
MAX_AGE_S = 300.0
OP_DISPATCH, OP_ACK, OP_VALIDATION = 0, 12, 13
_PLAIN = re.compile(r"[A-Za-z0-9_\-]{1,128}")
_DIGITS = re.compile(r"[0-9]{1,20}")

EventHandler = Callable[[dict[str, Any]], Awaitable[None]]


class QQWebhook:
    def __init__(self, app_secret: str, *, clock: Callable[[], float] = time.time) -> None:
        self._key = signing_key(app_secret)
        self._public = self._key.public_key()
        self._clock = clock
        #: Set while the channel runs.
        self.handle: EventHandler | None = None

    def _refusal(self, request: web.Request, body: bytes) -> str | None:
        signature = request.headers.get(SIGNATURE_HEADER)
        timestamp = request.headers.get(TIMESTAMP_HEADER)
        if not signature or not timestamp:
            return "half-signed"
        if not _DIGITS.fullmatch(timestamp):
            return "bad timestamp"
        if abs(self._clock() - int(timestamp)) > MAX_AGE_S:
            return "stale"
        if not verify(self._public, signature, timestamp.encode() + body):
            return "forged"
        return None

    async def handle_request(self, request: web.Request) -> web.Response:
        body = await request.read()
        signed = SIGNATURE_HEADER in request.headers or TIMESTAMP_HEADER in request.headers
        refusal = self._refusal(request, body) if signed else None
        if refusal is not None:
            return self._refused(request, refusal)
        try:
            payload = json_payload(body)
        except UnreadableJson:
            payload = None
        if not isinstance(payload, dict):
            if not signed:
                return self._refused(request, "unsigned")
            return web.json_response({"error": "body is not a JSON object"}, status=400)
        if not signed and payload.get("op") != OP_VALIDATION:
            return self._refused(request, "unsigned")
        op = payload.get("op")
        if op == OP_VALIDATION:
            return self._validate(payload.get("d"))
        if op != OP_DISPATCH:
            return web.json_response({"op": OP_ACK, "d": 0})
        handle = self.handle
        if handle is None:
            return web.json_response({"error": "channel not running"}, status=503)
        try:
            await handle(payload)
        except InboundRefused as refused:
            return refused_response(refused)
        except PipeClosed:
            return web.json_response({"error": "channel stopping"}, status=503)
        if payload.get("t") == INTERACTION_EVENT:
            return web.json_response({"op": OP_ACK, "d": 0, "code": 0})
        return web.json_response({"op": OP_ACK, "d": 0})

    @staticmethod
    def _refused(request: web.Request, reason: str) -> web.Response:
        log.warning("qq.webhook_refused", reason=reason, remote=request.remote)
        return web.json_response({"error": f"{reason} request"}, status=401)

    def _validate(self, data: object) -> web.Response:
        plain_token = data.get("plain_token") if isinstance(data, dict) else None
        event_ts = data.get("event_ts") if isinstance(data, dict) else None
        if not (
            isinstance(plain_token, str)
            and isinstance(event_ts, str)
            and _PLAIN.fullmatch(plain_token)
            and _DIGITS.fullmatch(event_ts)
        ):
            return web.json_response({"error": "op 13 needs plain_token and event_ts"}, status=400)
        signature = sign_hex(self._key, (event_ts + plain_token).encode())
        log.info("qq.webhook_validated")
        return web.json_response({"plain_token": plain_token, "signature": signature})
