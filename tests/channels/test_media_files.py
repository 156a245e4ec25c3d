"""The one media helper: safe names, files under the media directory, size limits."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from channels.errors import ChannelError
from channels.media_files import (
    MediaStore,
    media_root,
    read_file,
    safe_name,
    safe_suffix,
    save_media,
    save_within,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("photo.png", "photo.png"),
        ("../../etc/passwd", "_.._etc_passwd"),
        ("...", "_"),
        ("", "_"),
        ("图片.jpg", "_.jpg"),
        ("a" * 150 + ".pdf", "a" * 96 + ".pdf"),
    ],
)
def test_names_cannot_leave_their_directory(text: str, expected: str) -> None:
    safe = safe_name(text)
    assert safe == expected
    assert "/" not in safe
    assert not safe.startswith(".")


def test_the_options_say_what_else_is_kept_or_trimmed() -> None:
    assert safe_name("!room:example.org", trim_ends="._") == "room_example.org"
    assert safe_name("ann@example.org", keep="@") == "ann@example.org"
    assert safe_name("...", fallback="file") == "file"
    assert safe_name("x" * 300, max_chars=None) == "x" * 300


@pytest.mark.parametrize(
    ("name", "expected"),
    [("Report.PDF", ".pdf"), ("archive.tar.gz", ".gz"), ("odd.p d f", ""), (None, ""), ("x", "")],
)
def test_only_plain_suffixes_are_kept(name: str | None, expected: str) -> None:
    assert safe_suffix(name) == expected


async def test_a_saved_file_leaves_no_partial_file(tmp_path: Path) -> None:
    target = media_root(tmp_path, "telegram") / "42" / "1-photo.jpg"
    assert await save_media(target, b"\xff\xd8") == target
    assert target.read_bytes() == b"\xff\xd8"
    assert [path.name for path in target.parent.iterdir()] == ["1-photo.jpg"]


async def test_a_store_refuses_a_path_outside_its_directory(tmp_path: Path) -> None:
    store = MediaStore(tmp_path, "slack", max_bytes=10)
    with pytest.raises(ValueError, match="outside the media directory"):
        await store.save(tmp_path / "elsewhere.bin", b"x")
    assert not (tmp_path / "elsewhere.bin").exists()


def test_a_store_keeps_only_files_within_its_limit(tmp_path: Path) -> None:
    store = MediaStore(tmp_path, "discord", max_bytes=10)
    assert store.root == tmp_path / "media" / "discord"
    assert store.fits(None)
    assert store.fits(10)
    assert not store.fits(11)


def test_a_file_over_the_limit_is_logged_as_too_large(tmp_path: Path) -> None:
    store = MediaStore(tmp_path, "discord", max_bytes=10)
    with capture_logs() as events:
        assert store.admits(10, file_id="f1")
        assert store.admits(None, file_id="f2")
        assert not store.admits(11, file_id="f3")
    assert [(e["event"], e.get("file_id"), e.get("size")) for e in events] == [
        ("discord.media_too_large", "f3", 11)
    ]


async def test_an_outbound_file_is_read_or_refused_with_what_the_platform_takes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "report.pdf"
    path.write_bytes(b"x" * 11)
    assert await read_file(str(path), channel="email", max_bytes=11) == b"x" * 11
    with pytest.raises(ChannelError, match=r"report\.pdf is 11 bytes; email takes up to 10"):
        await read_file(str(path), channel="email", max_bytes=10, limit_note="email takes up to 10")
    with pytest.raises(ChannelError, match="cannot read media file") as missing:
        await read_file(str(tmp_path / "missing.pdf"), channel="email")
    assert missing.value.suggestion == "the agent must pass paths this process can read"


async def test_a_download_over_the_limit_is_not_saved(tmp_path: Path) -> None:
    target = media_root(tmp_path, "line") / "chat" / "big.jpg"
    with capture_logs() as events:
        assert await save_within(target, b"x" * 11, 10, channel="line", message_id="m1") is None
    assert not target.exists()
    assert [(e["event"], e["message_id"]) for e in events] == [("line.media_too_large", "m1")]
    assert await save_within(target, b"x" * 10, 10, channel="line") == str(target)
    assert target.read_bytes() == b"x" * 10
