"""Feishu/Lark event security: the `X-Lark-Signature` check and the `encrypt` payload cipher.

- Signature: hex SHA-256 of `timestamp + nonce + encrypt_key + raw body` (the request's
  `X-Lark-Request-Timestamp` and `X-Lark-Request-Nonce` headers), compared in constant time.
- Encryption: `{"encrypt": base64(iv ‖ AES-256-CBC(plaintext))}` with the key SHA-256(encrypt
  key), the IV the first 16 bytes, PKCS#7 padding to AES's 16-byte blocks.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

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
