"""QQ's Ed25519 webhook signatures, with the key QQ derives from the bot's AppSecret.

QQ documents the seed as the secret repeated until it is at least 32 bytes long, then cut to
32 bytes; the key pair grown from that seed signs the op 13 validation answer
(`event_ts + plain_token`) and QQ signs every event with it (`X-Signature-Timestamp + body`,
hex in `X-Signature-Ed25519`). Both halves use `cryptography`'s Ed25519.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

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
