"""Links to received files for agents on other hosts: `<http base>/media/<token>`, served by the
daemon's own HTTP server.

A token is the file's place under the data directory, its SHA-256 and an expiry, sealed with
AES-GCM under a key derived (HMAC-SHA256) from a secret kept in `<data_dir>/media-links.key`
(mode 0600, made on first use). Sealed, a token says nothing of the local path; its tag signs
it, so a token cannot be altered to name another file or a later expiry, and a file changed
since its link was made is not served. The server answers 403 to any token it cannot open, or
that has expired, and there is no listing.

The daemon makes one `MediaLinks` per process (`ProcessServices.media_links`) and hands it to
the agents and channels its profiles build.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bus import Attachment
from channels.media_info import MediaInfo, human_size

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SECRET_FILE = "media-links.key"
ROUTE = "/media/{token}"
_PURPOSE = b"octos media link v1"
_NONCE_BYTES = 12
#: How long a link to a reply's file, sent into a chat, keeps working: people scroll back.
REPLY_LINK_TTL_S = 30 * 86_400.0


class MediaLinks:
    """Makes and opens the signed, expiring links of one data directory."""

    def __init__(
        self,
        secret: bytes,
        data_dir: Path,
        *,
        base_url: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        # Imported here: every channel reads this module, only a daemon's links need the cipher.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._cipher: AESGCM = AESGCM(hmac.new(secret, _PURPOSE, hashlib.sha256).digest())
        self._root = data_dir.resolve()
        self._clock = clock
        self.base_url = base_url.rstrip("/")

    @classmethod
    def open(cls, data_dir: Path, *, base_url: str = "") -> MediaLinks:
        """The links of `data_dir`, its secret read or made (blocking: at start-up)."""
        return cls(read_or_make_secret(data_dir / SECRET_FILE), data_dir, base_url=base_url)

    def url_for(self, media: MediaInfo | Attachment, ttl_s: float) -> str:
        """A link that serves exactly `media` for `ttl_s` seconds."""
        place = Path(media.path).resolve().relative_to(self._root)
        claims = {"p": place.as_posix(), "h": media.sha256, "e": int(self._clock() + ttl_s)}
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = self._cipher.encrypt(nonce, json.dumps(claims).encode(), _PURPOSE)
        token = base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode("ascii")
        return f"{self.base_url}/media/{token}"

    def open_token(self, token: str) -> tuple[Path, str] | None:
        """The file a valid, unexpired token names and the SHA-256 it must have; None for any
        other token."""
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            nonce, sealed = raw[:_NONCE_BYTES], raw[_NONCE_BYTES:]
            claims = json.loads(self._cipher.decrypt(nonce, sealed, _PURPOSE))
            place, digest, expires = claims["p"], claims["h"], claims["e"]
        except (binascii.Error, ValueError, InvalidTag, KeyError, TypeError):
            return None
        if not isinstance(expires, int) or expires < self._clock():
            return None
        if not isinstance(place, str) or not isinstance(digest, str):
            return None
        path = (self._root / place).resolve()
        if not path.is_relative_to(self._root):
            return None
        return path, digest


def public_base_url(public_url: str | None, host: str, port: int) -> str:
    """`public_url` when configured, else the address the server listens on (loopback for a
    wildcard address)."""
    if public_url:
        return public_url.rstrip("/")
    shown = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def read_or_make_secret(path: Path) -> bytes:
    """The secret in `path`, made (32 random bytes, mode 0600) when there is none."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass  # the first start with this data directory: made below
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_bytes(32)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()  # another process of the data directory made it first
    with os.fdopen(descriptor, "wb") as file:
        file.write(secret)
    return secret


def link_to(attachment: Attachment, links: MediaLinks | None) -> str | None:
    """Where a person or a platform can fetch a reply's file: a signed link of the gateway's
    HTTP server (valid `REPLY_LINK_TTL_S`), else the URL the agent got it from, else None."""
    if links is not None and links.base_url:
        try:
            return links.url_for(attachment, REPLY_LINK_TTL_S)
        except ValueError:
            pass  # a file outside the data directory has no link; the agent's URL may do
    return attachment.url


def attachment_as_text(attachment: Attachment, links: MediaLinks | None) -> str:
    """A reply's file on a platform without files: its caption or name and its link."""
    shown = attachment.caption or attachment.name
    url = link_to(attachment, links)
    if url is None:
        return f"[{attachment.kind}: {shown}, {human_size(attachment.size)}]"
    return f"{shown}: {url}"
