"""Webhook mode: Feishu POSTs each event to the daemon's HTTP server.

With an Encrypt Key set (required here), Feishu encrypts every body (`{"encrypt": ...}`) and
signs every event with `X-Lark-Signature` over timestamp, nonce, key and the raw body. The URL
check (`url_verification`) is answered with its challenge only when its token is ours; every
other event must be signed, recent (`MAX_SKEW_S`), and carry our verification token. The 200
goes back once the message is durable (Feishu wants it within 3 s and retries otherwise; a
retry has the same `event_id` and is answered as usual).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from channels.feishu.events import EventEnvelope, MalformedEvent, read_envelope
from channels.lifecycle.bounded import InboundDedup
from channels.web.webhook import (
    UnreadableJson,
    WebhookRefused,
    hand_over,
    is_stale,
    json_payload,
    not_running,
    refusal_response,
)

# Feishu/Lark event security: the `X-Lark-Signature` check and the `encrypt` payload cipher.
#
# - Signature: hex SHA-256 of `timestamp + nonce + encrypt_key + raw body` (the request's
#   `X-Lark-Request-Timestamp` and `X-Lark-Request-Nonce` headers), compared in constant time.
# - Encryption: `{"encrypt": base64(iv ‖ AES-256-CBC(plaintext))}` with the key SHA-256(encrypt
#   key), the IV the first 16 bytes, PKCS#7 padding to AES's 16-byte blocks.
_IV_BYTES = 16
_BLOCK_BITS = 128


class DecryptError(ValueError):
    """An `encrypt` payload that is not Feishu's for this Encrypt Key."""


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def signature_matches(
    offered: str, timestamp: str, nonce: str, encrypt_key: str, body: bytes
) -> bool:
    expected = signature(timestamp, nonce, encrypt_key, body)
    return hmac.compare_digest(expected.encode(), offered.strip().lower().encode())


class FeishuCipher:
    def __init__(self, encrypt_key: str) -> None:
        self._key = hashlib.sha256(encrypt_key.encode("utf-8")).digest()

    def decrypt(self, encrypted: str) -> bytes:
        try:
            sealed = base64.b64decode(encrypted, validate=True)
        except binascii.Error as exc:
            raise DecryptError("encrypt is not base64") from exc
        if len(sealed) < 2 * _IV_BYTES or len(sealed) % _IV_BYTES:
            raise DecryptError(f"{len(sealed)} bytes is not an IV and whole AES blocks")
        decryptor = self._cipher(sealed[:_IV_BYTES]).decryptor()
        padded = decryptor.update(sealed[_IV_BYTES:]) + decryptor.finalize()
        unpadder = padding.PKCS7(_BLOCK_BITS).unpadder()
        try:
            return unpadder.update(padded) + unpadder.finalize()
        except ValueError as exc:
            raise DecryptError("bad padding: wrong encrypt_key?") from exc

    def encrypt(self, plain: bytes, iv: bytes | None = None) -> str:
        """What Feishu sends for `plain` (the fake and the tests use it)."""
        vector = os.urandom(_IV_BYTES) if iv is None else iv
        padder = padding.PKCS7(_BLOCK_BITS).padder()
        padded = padder.update(plain) + padder.finalize()
        encryptor = self._cipher(vector).encryptor()
        return base64.b64encode(vector + encryptor.update(padded) + encryptor.finalize()).decode()

    def _cipher(self, iv: bytes) -> Cipher[modes.CBC]:
        return Cipher(algorithms.AES(self._key), modes.CBC(iv))


log = structlog.get_logger(__name__)

TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
SIGNATURE_HEADER = "X-Lark-Signature"
#: How far an event's timestamp may be from our clock, in seconds, before it is a replay (U:
#: Feishu documents no window; its retries are signed anew).
MAX_SKEW_S = 300.0

Handler = Callable[[EventEnvelope], Awaitable[None]]


class WebhookReceiver:
    """The aiohttp handler of the event path; `handle` is set while the channel runs."""

    def __init__(
        self, encrypt_key: str, verification_token: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._encrypt_key = encrypt_key
        self._cipher = FeishuCipher(encrypt_key)
        self._token = verification_token.encode()
        self._clock = clock
        self._recent = InboundDedup(max_entries=4096, ttl_s=3600.0)
        self.handle: Handler | None = None

    async def handle_request(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            payload = self._open(raw)
            if payload.get("type") == "url_verification":
                return self._challenge(request, raw, payload)
            self._check_signature(request, raw)
            envelope = read_envelope(payload)
            self._check_token(envelope.token)
        except WebhookRefused as refused:
            return refusal_response(request, refused, event="feishu.webhook_refused")
        except MalformedEvent as exc:
            # Signed and ours, but unreadable: retrying cannot help, so it is acknowledged.
            log.warning("feishu.malformed_event_skipped", error=str(exc))
            return web.json_response({})
        return await self._deliver(envelope)

    def _open(self, raw: bytes) -> dict[str, Any]:
        try:
            outer = json_payload(raw)
        except UnreadableJson:
            raise WebhookRefused(400, "the body is not JSON") from None
        if not isinstance(outer, dict) or not isinstance(outer.get("encrypt"), str):
            raise WebhookRefused(401, "unencrypted: the app has an Encrypt Key, so Feishu encrypts")
        try:
            payload = json_payload(self._cipher.decrypt(outer["encrypt"]))
        except (DecryptError, UnreadableJson):
            raise WebhookRefused(401, "does not decrypt with our encrypt_key") from None
        if not isinstance(payload, dict):
            raise WebhookRefused(400, "the decrypted payload is not an object")
        return payload

    def _challenge(self, request: web.Request, raw: bytes, payload: dict[str, Any]) -> web.Response:
        if request.headers.get(SIGNATURE_HEADER) is not None:
            self._check_signature(request, raw)
        self._check_token(str(payload.get("token", "")))
        log.info("feishu.url_verified")
        return web.json_response({"challenge": payload.get("challenge", "")})

    def _check_signature(self, request: web.Request, raw: bytes) -> None:
        timestamp = request.headers.get(TIMESTAMP_HEADER, "")
        nonce = request.headers.get(NONCE_HEADER, "")
        offered = request.headers.get(SIGNATURE_HEADER, "")
        if not (timestamp and nonce and offered):
            raise WebhookRefused(401, "unsigned")
        if not signature_matches(offered, timestamp, nonce, self._encrypt_key, raw):
            raise WebhookRefused(401, "wrong signature")
        if is_stale(timestamp, self._clock(), MAX_SKEW_S):
            raise WebhookRefused(401, "stale timestamp")

    def _check_token(self, token: str) -> None:
        if not hmac.compare_digest(token.encode(), self._token):
            raise WebhookRefused(401, "wrong verification token")

    async def _deliver(self, envelope: EventEnvelope) -> web.Response:
        handle = self.handle
        if handle is None:
            return not_running()
        if envelope.event_id in self._recent:
            return web.json_response({})
        refusal = await hand_over(handle(envelope), event="feishu.event_deferred")
        if refusal is not None:
            return refusal
        self._recent.seen(envelope.event_id)
        return web.json_response({})
