"""WeCom's callback encryption ("WXBizMsgCrypt"): the SHA-1 signature and AES-256-CBC.

- Signature: `msg_signature` = hex SHA-1 of the sorted, concatenated `[token, timestamp, nonce,
  encrypted]`, compared in constant time.
- Key: base64-decode(EncodingAESKey + "="), 32 bytes; the IV is its first 16 bytes.
- Plaintext: 16 random bytes, the message length as 4 bytes big-endian, the message, then the
  receiver id (the corp id), PKCS#7-padded to a multiple of **32** bytes. Octos unpads only pads
  up to 16 and so refuses about half of all callbacks; the documented example pads 30 bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

#: WeCom pads to 32-byte blocks, not AES's 16 (PKCS7 takes the block size in bits).
PAD_BLOCK_BITS = 256
_RANDOM_BYTES = 16
_LENGTH = struct.Struct(">I")


class CryptoError(ValueError):
    """A callback that does not decrypt, or that is addressed to another corp."""


class SignatureMismatch(CryptoError):
    """`msg_signature` does not match: not from WeCom, or for another token."""


def signature(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    joined = "".join(sorted([token, timestamp, nonce, encrypted]))
    return hashlib.sha1(joined.encode("utf-8")).hexdigest()


def aes_key(encoding_aes_key: str) -> bytes:
    """The 32-byte key an EncodingAESKey (43 characters of base64) stands for."""
    try:
        key = base64.b64decode(encoding_aes_key + "=", validate=True)
    except binascii.Error as exc:
        raise ValueError("EncodingAESKey is not base64") from exc
    if len(key) != 32:
        raise ValueError(f"EncodingAESKey decodes to {len(key)} bytes, not 32")
    return key


class WeComCrypto:
    """Checks, decrypts and encrypts callback payloads for one application."""

    def __init__(self, token: str, encoding_aes_key: str, receiver_id: str) -> None:
        self._token = token
        self._key = aes_key(encoding_aes_key)
        self._receiver_id = receiver_id.encode("utf-8")

    def verify(self, msg_signature: str, timestamp: str, nonce: str, encrypted: str) -> None:
        expected = signature(self._token, timestamp, nonce, encrypted)
        if not hmac.compare_digest(expected.encode(), msg_signature.encode()):
            raise SignatureMismatch("msg_signature does not match")

    def decrypt(self, encrypted: str) -> bytes:
        """The message inside `encrypted`, after checking it is addressed to our corp."""
        try:
            sealed = base64.b64decode(encrypted, validate=True)
        except binascii.Error as exc:
            raise CryptoError("the payload is not base64") from exc
        if not sealed or len(sealed) % 16:
            raise CryptoError(f"{len(sealed)} bytes is not a whole number of AES blocks")
        decryptor = self._cipher().decryptor()
        padded = decryptor.update(sealed) + decryptor.finalize()
        unpadder = padding.PKCS7(PAD_BLOCK_BITS).unpadder()
        try:
            plain = unpadder.update(padded) + unpadder.finalize()
        except ValueError as exc:
            raise CryptoError("bad padding: wrong EncodingAESKey?") from exc
        body = plain[_RANDOM_BYTES:]
        if len(body) < _LENGTH.size:
            raise CryptoError("the plaintext is too short")
        (length,) = _LENGTH.unpack_from(body)
        message, receiver = (
            body[_LENGTH.size : _LENGTH.size + length],
            body[_LENGTH.size + length :],
        )
        if len(message) != length:
            raise CryptoError("the plaintext is shorter than its length field says")
        if not hmac.compare_digest(receiver, self._receiver_id):
            raise CryptoError("the payload is addressed to another corp id")
        return message

    def encrypt(self, message: bytes, random_prefix: bytes | None = None) -> str:
        """What WeCom would send for `message` (the fake and the tests use it)."""
        prefix = os.urandom(_RANDOM_BYTES) if random_prefix is None else random_prefix
        plain = prefix + _LENGTH.pack(len(message)) + message + self._receiver_id
        padder = padding.PKCS7(PAD_BLOCK_BITS).padder()
        padded = padder.update(plain) + padder.finalize()
        encryptor = self._cipher().encryptor()
        return base64.b64encode(encryptor.update(padded) + encryptor.finalize()).decode()

    def sign(self, timestamp: str, nonce: str, encrypted: str) -> str:
        return signature(self._token, timestamp, nonce, encrypted)

    def _cipher(self) -> Cipher[modes.CBC]:
        return Cipher(algorithms.AES(self._key), modes.CBC(self._key[:16]))
