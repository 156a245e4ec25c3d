"""Signed, expiring links to received files: each token opens its one file until it expires."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

from channels.media_info import describe
from channels.media_links import SECRET_FILE, MediaLinks, public_base_url


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def saved(data_dir: Path, name: str, data: bytes) -> Path:
    path = data_dir / "main" / "media" / "telegram" / "42" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def token_of(url: str) -> str:
    return url.rpartition("/media/")[2]


def test_a_token_opens_its_file_until_it_expires(tmp_path: Path) -> None:
    clock = Clock()
    links = MediaLinks(b"k" * 32, tmp_path, base_url="http://gw:8080/", clock=clock)
    path = saved(tmp_path, "photo.jpg", b"\xff\xd8 photo")
    url = links.url_for(describe(str(path)), ttl_s=60)
    assert url.startswith("http://gw:8080/media/")
    assert "photo" not in url
    assert "telegram" not in url
    assert links.open_token(token_of(url)) == (
        path.resolve(),
        hashlib.sha256(b"\xff\xd8 photo").hexdigest(),
    )
    clock.now += 61
    assert links.open_token(token_of(url)) is None


def test_a_token_cannot_be_altered_or_opened_with_another_secret(tmp_path: Path) -> None:
    links = MediaLinks(b"k" * 32, tmp_path)
    other = MediaLinks(b"x" * 32, tmp_path)
    token = token_of(links.url_for(describe(str(saved(tmp_path, "a.txt", b"a"))), ttl_s=60))
    flipped = token[:10] + ("A" if token[10] != "A" else "B") + token[11:]
    assert links.open_token(flipped) is None
    assert other.open_token(token) is None
    assert links.open_token("") is None
    assert links.open_token("not base64 at all!") is None


def test_each_token_is_bound_to_its_own_file(tmp_path: Path) -> None:
    links = MediaLinks(b"k" * 32, tmp_path)
    first = saved(tmp_path, "a.txt", b"first")
    second = saved(tmp_path, "b.txt", b"second")
    for path in (first, second):
        opened = links.open_token(token_of(links.url_for(describe(str(path)), ttl_s=60)))
        assert opened is not None
        assert opened[0] == path.resolve()


def test_the_secret_is_made_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    first = MediaLinks.open(tmp_path)
    mode = stat.S_IMODE((tmp_path / SECRET_FILE).stat().st_mode)
    assert mode == 0o600
    path = saved(tmp_path, "a.txt", b"a")
    token = token_of(first.url_for(describe(str(path)), ttl_s=60))
    assert MediaLinks.open(tmp_path).open_token(token) is not None  # same secret after restart


def test_the_base_url_is_the_public_url_or_the_listener() -> None:
    assert public_base_url("https://bot.example.com/", "0.0.0.0", 80) == "https://bot.example.com"
    assert public_base_url(None, "0.0.0.0", 8080) == "http://127.0.0.1:8080"
    assert public_base_url(None, "::1", 8080) == "http://[::1]:8080"
